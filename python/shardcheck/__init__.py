"""shardcheck's Python side: capture a PyTorch program for `shardcheck run DIR`.

    import shardcheck
    with shardcheck.capture("captures/step"):
        train_step()

See docs/capture.md.
"""

from .capture import capture

__all__ = ["capture"]
