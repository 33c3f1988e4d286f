"""The defense contract: one class per defense, with the hooks it uses, found through entry points.

A defense subclasses ``Defense`` and is published under the entry-point group ``leakbed.defenses``
(``defenses.registry``), built-in and third-party alike. It declares its name, its parameters (a
pydantic model: every field with a default, a unit and a bound; given beside ``name`` in a
``defenses`` entry), where it comes from and what it protects against (``source``, ``threat``),
what it is compatible with (``check``), and overrides the hooks it uses:

* ``data``: the device's training data before local training (data level: background replacement);
* ``training``: a context around local training (model level: dropout);
* ``mod``: a Flower Mod around the device's train handler (update level: noise, clipping, DP, what
  the reply reports); ``mod_stage`` orders the Mods, the highest outermost (``data_stage`` orders the
  data hooks the same way, the lowest first);
* ``wrap_strategy`` and ``privacy``: its server half, if it has one (DP-FedAvg's noise on the aggregate
  and its accounting), applied by the product around the curious strategy.

Device hooks run on the device of each user that adopts the defense (``fraction`` or ``users`` of
its entry), in config order within a stage, with a ``DeviceContext``: the plan the server sent, this
device's user, the round, and a seed of the defense's own.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Generic

from flwr.clientapp.typing import Mod
from flwr.serverapp.strategy import Strategy
from torch import nn

from leakbed.core.data import Federation, UserData, federation_of
from leakbed.core.data.corpus import Corpus
from leakbed.core.params import NoParams, P, Params, bind_params
from leakbed.core.plan import DevicePlan


@dataclass(frozen=True)
class DefenseSetting:
    """The run as a defense's ``check`` sees it before anything starts."""

    corpus: Corpus
    float_state: bool  # every entry of the model's state is floating point (Flower's clipping Mods need it)
    integer_buffer: str  # the first integer buffer, when not
    secure_aggregation: bool


@dataclass
class DeviceContext:
    """What a device hook gets: the plan the server sent, this device's user and partition, the round, and the
    index of the defense's entry (its seeds derive from it, so two entries of one defense differ)."""

    plan: DevicePlan
    partition: int
    round: int
    index: int = 0
    fed: Federation | None = None  # the device's federation, when the caller has built it already

    @property
    def federation(self) -> Federation:
        if self.fed is None:
            p = self.plan
            self.fed = federation_of(p.data, p.split, p.seed, p.rule)
        return self.fed

    @property
    def user(self) -> str:
        return self.federation.user_ids[self.partition]

    def seed(self, purpose: str) -> int:
        """A seed of this defense entry for ``purpose``, on this device, in this round (for new defenses; the
        built-in ones keep the derivations their published numbers were measured with)."""
        return zlib.crc32(f"{self.plan.seed}/{self.round}/{self.user}/{self.index}/{purpose}".encode())


@dataclass(frozen=True)
class ServerContext:
    """What a defense's server half gets: the run's users, how many devices are sampled a round, the rounds run; the
    privacy audit's canary replies averaged beside them each round (a DP wrapper's noise is calibrated to every reply
    it averages), and the run's noise secret (draw DP noise from it, never from ``seed``: ``core.secret_noise``)."""

    users: list[str]
    sampled: int
    rounds: int
    seed: int
    canaries: int = 0
    noise_secret: int | None = None  # None: draw from the OS's randomness


class Defense(Generic[P]):
    """Subclass it with its own parameters' model, ``class MyDefense(Defense[MyParams])`` (``Defense[NoParams]`` for
    none), set the class attributes, override the hooks the defense uses; each hook gets its validated parameters
    as that model (``params`` is set from the subscript when the class does not set it)."""

    name: ClassVar[str]
    params: ClassVar[type[Params]] = NoParams
    source: ClassVar[str] = ""  # the seed (file, section) or paper it implements
    threat: ClassVar[str] = ""  # what it hides, from whom (the curious server, the global models' readers)
    data_stage: ClassVar[int] = 20  # order of data hooks: lower first (config order within a stage)
    mod_stage: ClassVar[int] = 20  # order of Mods: a higher one sits outside, so it acts last on the reply
    uniform_weights: ClassVar[bool] = False  # the server averages updates with equal weights (its noise assumes it)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        bind_params(cls, Defense)

    def check(self, params: P, setting: DefenseSetting) -> str | None:  # noqa: ARG002 - for subclasses
        """A one-line reason this run cannot take the defense, or None."""
        return None

    def data(self, ctx: DeviceContext, params: P, data: UserData) -> UserData:  # noqa: ARG002
        """The device's training data after this defense (data level)."""
        return data

    @contextlib.contextmanager
    def training(self, ctx: DeviceContext, params: P, model: nn.Module) -> Iterator[None]:  # noqa: ARG002
        """A context around the device's local training (model level)."""
        yield

    def mod(self, ctx: DeviceContext, params: P) -> Mod | None:  # noqa: ARG002
        """A Flower Mod around the device's train handler (update level), or None."""
        return None

    def clip(self, params: P) -> float | None:  # noqa: ARG002
        """The L2 norm it bounds each update to, or None (the privacy audit's canaries are made far above it, and pass
        ``mod`` as an adopting device's reply does, so a clipper that does not deliver this norm shows)."""
        return None

    def wrap_strategy(self, strategy: Strategy, params: P, ctx: ServerContext) -> Strategy:  # noqa: ARG002
        """Its server half around the curious strategy (the product applies it), or the strategy itself."""
        return strategy

    def privacy(self, params: P, ctx: ServerContext, adopters: int, releases: int) -> dict[str, Any] | None:  # noqa: ARG002
        """Its privacy accounting for ``metrics.json`` (ε, δ...), or None."""
        return None
