"""A device's SGD (with momentum) through torch's functional ``torch.optim.sgd.sgd``: the kernel
``torch.optim.SGD.step`` calls, with the same arguments, so the same numbers (``tests/core/test_sgd.py``: equal
parameters, bit for bit).

Why not ``torch.optim.SGD`` itself: its step and its parameter-group methods are marked not to be compiled, and the
mark imports ``torch._dynamo`` on their first call, 0.8 CPU-seconds in every new process (measured here, torch 2.15).
leakbed compiles nothing, and a deployment's SuperNode starts a ClientApp process for every message: a device's
train message paid it each time, and each Ray ClientApp actor once. Adam, an option, stays ``torch.optim.Adam``."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.optim.sgd import sgd


class SGD:
    """``torch.optim.SGD(params, lr, momentum)``'s ``zero_grad`` and ``step``: a parameter without a gradient is
    skipped and keeps no momentum buffer, as there."""

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float, momentum: float = 0.0) -> None:
        self.params = list(params)
        self.lr, self.momentum = lr, momentum
        self.buffers: list[torch.Tensor | None] = [None] * len(self.params)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        live = [i for i, p in enumerate(self.params) if p.grad is not None]
        params = [self.params[i] for i in live]
        grads = [p.grad for p in params if p.grad is not None]
        buffers = [self.buffers[i] for i in live]
        sgd(params, grads, buffers, has_sparse_grad=any(g.is_sparse for g in grads), weight_decay=0.0,
            momentum=self.momentum, lr=self.lr, dampening=0.0, nesterov=False, maximize=False)  # fmt: skip
        for i, buffer in zip(live, buffers, strict=True):  # sgd fills the list with the new buffers
            self.buffers[i] = buffer
