"""Dropout in the device's local training (seed 002 §7.3.3).

The seed adds dropout "after the max pool layers" of the shared model; for a model without
pooling (the LSTMs) it is applied to the input of the final fully-connected layer. Only the
adopting device's training changes: the model it sends keeps the same architecture, and the
attacker's shadow training (which does not know who defends) has no dropout. The seed found that
dropout can make inference attacks *stronger* (more variance between participants' updates);
the testbed measures it rather than assuming it protects.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import ClassVar

from pydantic import Field
from torch import nn
from torch.nn import functional

from leakbed.core.models import final_linear
from leakbed.defenses.contract import Defense, DeviceContext, Params


@contextlib.contextmanager
def dropout_during(model: nn.Module, p: float) -> Iterator[int]:
    """Within the block, dropout with probability ``p`` after every max-pool layer (or before the final
    FC layer); yields the number of places it acts; p = 0 changes nothing."""
    if p <= 0:
        yield 0
        return
    pools = [m for m in model.modules() if isinstance(m, nn.MaxPool1d | nn.MaxPool2d | nn.MaxPool3d)]
    hooks = [m.register_forward_hook(lambda mod, _inp, out: functional.dropout(out, p, mod.training)) for m in pools]
    if not pools:
        final = dict(model.named_modules())[final_linear(model)]
        hooks.append(final.register_forward_pre_hook(lambda mod, inp: (functional.dropout(inp[0], p, mod.training),)))
    try:
        yield len(hooks)
    finally:
        for h in hooks:
            h.remove()


class DropoutParams(Params):
    p: float = Field(0.5, ge=0.0, lt=1.0, description="drop probability in the device's local training [probability]")


class Dropout(Defense):
    name: ClassVar[str] = "dropout"
    params = DropoutParams
    source = "seed 002 §7.3.3"
    threat = "the curious server (dropout may make the attacks stronger: the testbed measures it)"

    @contextlib.contextmanager
    def training(self, ctx: DeviceContext, params: DropoutParams, model: nn.Module) -> Iterator[None]:
        with dropout_during(model, params.p):
            yield
