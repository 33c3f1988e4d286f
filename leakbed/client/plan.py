"""The device's plan for the message it is handling: decoded once, in the outermost Mod, for everything after it.

The server sends each round's plan (``core.plan``) and training keys in the message's config; ``plan_mod``
validates them once and makes them the current ``DeviceRound`` (a context variable) while the rest of the
Mods and the train handler run, so no later step decodes the experiment again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cached_property

from flwr.app import Context, Message
from flwr.clientapp.typing import ClientAppCallable

from leakbed.core.data import Federation, federation_of
from leakbed.core.plan import PLAN_KEY, DevicePlan
from leakbed.core.training import TrainConfig

CONFIG = "config"  # the message's config record, as Flower's strategies name it


@dataclass
class DeviceRound:
    """This device in this round: the plan, its partition (its user), the round and the training to do."""

    plan: DevicePlan
    partition: int
    round: int
    train: TrainConfig | None  # None in a message without training keys

    @cached_property
    def federation(self) -> Federation:
        p = self.plan
        return federation_of(p.data, p.split, p.seed, p.rule)

    @property
    def user(self) -> str:
        fed = self.federation
        if not 0 <= self.partition < len(fed.user_ids):
            raise ValueError(f"partition-id {self.partition} outside the federation's {len(fed.user_ids)} users")
        return fed.user_ids[self.partition]


_CURRENT: ContextVar[DeviceRound | None] = ContextVar("leakbed_device_round", default=None)


def current() -> DeviceRound:
    """The round the device is handling (inside ``plan_mod``)."""
    found = _CURRENT.get()
    if found is None:
        raise RuntimeError("no device plan: the message was not handled through client.plan.plan_mod")
    return found


def decode(msg: Message, context: Context) -> DeviceRound:
    """The message's plan, validated (the one validation of a message)."""
    conf = msg.content.config_records[CONFIG]
    return DeviceRound(
        DevicePlan.model_validate_json(str(conf[PLAN_KEY])),
        int(context.node_config["partition-id"]),
        int(conf.get("server-round", 0)),
        TrainConfig.from_config(conf) if TrainConfig.KEYS[0] in conf else None,
    )


@contextlib.contextmanager
def handling(device: DeviceRound) -> Iterator[DeviceRound]:
    token = _CURRENT.set(device)
    try:
        yield device
    finally:
        _CURRENT.reset(token)


def plan_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Decode a train or evaluate message's plan once; other messages pass through."""
    conf = msg.content.config_records.get(CONFIG)
    if conf is None or PLAN_KEY not in conf:
        return call_next(msg, context)
    with handling(decode(msg, context)):
        return call_next(msg, context)
