"""shardcheck's Python side: capture a PyTorch program for `shardcheck run DIR`.

    import shardcheck
    with shardcheck.capture("captures/step"):
        train_step()

See docs/capture.md.
"""

# The module itself, which is callable: shardcheck.capture("DIR") is the context manager, and
# `import shardcheck.capture` (or `from shardcheck import capture`) gives the module.
from . import capture

__all__ = ["capture"]
