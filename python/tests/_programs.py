"""Small programs the tests capture (their line numbers are asserted: keep them in place)."""

import torch


def views_and_inplace():
    a = torch.ones(8)  # line 7
    b = a * 2  # line 8
    c = b.view(2, 4)  # line 9: a view touches nothing
    c[1].add_(1)  # line 10: reads and writes bytes 16..32 of b
    c.t().contiguous()  # line 11: a strided read of all of b
    return b.sum().item()  # line 12
