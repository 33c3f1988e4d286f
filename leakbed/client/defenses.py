"""The defenses this device's user adopts, applied through their hooks (``defenses.contract``).

Data hooks run before training (by ``data_stage``, then config order), model-level contexts around it,
and the Mods around the train handler (by ``mod_stage``, then config order: the first innermost, so it
acts first on the reply). A defense's parameters were validated by the server's preflight and travel
in the plan: the device builds them without validating again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from flwr.app import Context, Message
from flwr.clientapp.typing import ClientAppCallable, Mod
from torch import nn

from leakbed.client.plan import DeviceRound, current
from leakbed.core.data import UserData
from leakbed.defenses.contract import Defense, DeviceContext
from leakbed.defenses.registry import defense


@dataclass(frozen=True)
class Adopted:
    """One defense entry this device applies: the defense, its context on this device, its parameters."""

    defense: Defense
    ctx: DeviceContext
    params: Any


def adopted(device: DeviceRound) -> list[Adopted]:
    """The entries of the plan this device's user adopts, in config order."""
    out = []
    for entry in device.plan.defenses_of(device.user):
        d = defense(entry.name)
        ctx = DeviceContext(device.plan, device.partition, device.round, entry.index, device.federation)
        out.append(Adopted(d, ctx, d.params.model_construct(**entry.params)))
    return out


def apply_data(device: DeviceRound, data: UserData) -> UserData:
    """The device's training data after its data-level defenses."""
    for a in sorted(adopted(device), key=lambda a: (a.defense.data_stage, a.ctx.index)):
        data = a.defense.data(a.ctx, a.params, data)
    return data


@contextlib.contextmanager
def training(device: DeviceRound, model: nn.Module) -> Iterator[None]:
    """Every model-level defense's context around local training."""
    with contextlib.ExitStack() as stack:
        for a in adopted(device):
            stack.enter_context(a.defense.training(a.ctx, a.params, model))
        yield


def _bind(mod: Mod, call_next: ClientAppCallable) -> ClientAppCallable:
    return lambda m, c: mod(m, c, call_next)


def defense_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Wrap the train handler in the Mods of this device's update-level defenses."""
    if msg.metadata.message_type != "train":
        return call_next(msg, context)
    chain = call_next
    for a in sorted(adopted(current()), key=lambda a: (a.defense.mod_stage, a.ctx.index)):
        mod = a.defense.mod(a.ctx, a.params)
        if mod is not None:
            chain = _bind(mod, chain)
    return chain(msg, context)
