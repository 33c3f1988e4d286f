"""A run's memory, estimated from its config before anything starts, and the refusal of a run that cannot fit.

A simulation run is a set of processes, each a Python with its libraries plus what the run puts in it. The estimate
adds, in MiB of PSS (shared pages split between the processes that map them, so the parts add up):

* the launcher, Flower's processes (SuperLink, SuperExec, ``flwr run``) and Ray's daemons: fixed, plus the corpus the
  launcher loads for its preflight;
* the ClientApp actors: one per ``simulation.client_cpus`` CPUs of this machine, and the idle worker Ray keeps, each
  with the corpus (a table or a LEAF/TFF file is read whole by every actor; a generated population is made one user
  at a time) and a few copies of the model;
* the ServerApp: its libraries, the corpus, each round's replies and global models, the attacker's shadow updates of
  a round as the pool checks and files them, the full updates the suite reads (and those the shuffler holds back),
  and the utility evaluation's largest batch of outputs (``core.training.evaluate``);
* the attack lanes: the shadow lanes (``server.cores.shadow_lanes``: each the attacker's prior and one chunk of batched
  shadow training, ``core.batched_training``) beside ``workers.count`` fitting lanes, each reading every shadow and
  anonymous update.

The constants were measured (``python -m benchmarks.memory``, peak PSS per kind of process, benchmarks/README.md)
on the quickstart (60 synthetic users, a small CNN) and on ``leakbed/configs/text-50.toml`` (50 authors x 1,000 sentences,
the seeds' LSTM language model); the estimate of either is within 20 % of its measured peak, on the high side.
``check_memory`` refuses (ConfigError, one line) a run whose estimate exceeds the memory the machine has available,
naming the settings that lower its largest parts. It models the simulation (``leakbed run``); a process that a
leakbed launcher started (its ServerApp) does not check again: the launcher did, before it started anything.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import psutil

from leakbed.core.config import ConfigError, ExperimentConfig
from leakbed.core.data import Federation
from leakbed.core.data.lazy_users import LazyUsers, user_sizes
from leakbed.core.data.split import prior_size
from leakbed.core.declaration import Declaration, needs_of
from leakbed.core.models import attack_keys, build_model
from leakbed.core.processes import MARK
from leakbed.server.cores import shadow_lanes

MIB = 2**20
SKIP_ENV = "LEAKBED_MEMORY_CHECK"  # "0": do not refuse (the estimate is still what it is)
# PSS of each kind of process before the run puts anything in it [MiB] (measured; see the module's docstring)
LAUNCHER = 560.0  # the leakbed CLI: torch, Flower, the preflight
FLOWER = 260.0  # SuperLink, SuperExec and the `flwr run` that submits the run
RAY = 330.0  # GCS, raylet, client server, dashboard agents, `ray start` (measured with both monitors, left out now: a bound)
ACTOR = 560.0  # a ClientApp actor: torch, Flower, the ClientApp
IDLE = 160.0  # the workers Ray keeps beside the actors
SERVER = 620.0  # the Simulation Runtime's process: torch, Flower, Ray's driver, leakbed's ServerApp
LANE = 620.0  # the shadow lane in its sandbox: torch, scikit-learn
LANE_MORE = 120.0  # each further lane: the libraries' pages are shared with the first
LOADED = 4.0  # a corpus read from a file leaves about this multiple of its arrays in the reader (parsing's heap)
FIT_COPIES = 4.5  # a fitting lane holds its training vectors about this many times as float32 (float64, the model's)
EVAL_CHUNK = 64 * MIB  # core.training.EVAL_CHUNK_BYTES
SHADOW_CHUNK = 2 << 30  # core.batched_training.CPU_CHUNK_BYTES


@dataclass(frozen=True)
class Part:
    """One part of a run's memory: what it is, its size, and the settings that lower it."""

    name: str
    mib: float
    lower: tuple[str, ...]


@dataclass(frozen=True)
class Estimate:
    parts: tuple[Part, ...]

    @property
    def total_mib(self) -> float:
        return sum(p.mib for p in self.parts)

    def part(self, name: str) -> Part:
        return next(p for p in self.parts if p.name == name)

    def line(self) -> str:
        """The parts, largest first: ``ServerApp 1.4 GiB, ...``."""
        return ", ".join(f"{p.name} {p.mib / 1024:.1f} GiB" for p in sorted(self.parts, key=lambda p: -p.mib))


def estimate(cfg: ExperimentConfig, fed: Federation, declarations: dict[str, Declaration], cpus: int | None = None) -> Estimate:
    """The peak memory of a simulation run of ``cfg`` on ``fed`` (any prior: they run one after another)."""
    corpus = fed.corpus
    sizes = user_sizes(corpus.users)
    users = len(sizes)
    first = next(iter(corpus.users.values()))
    example = (first.x.nbytes + first.y.nbytes + sum(v.nbytes for v in first.attrs.values())) / max(len(first), 1)
    corpus_mib = sum(sizes.values()) * example / MIB
    lazy = isinstance(corpus.users, LazyUsers)
    read = 0.0 if lazy else corpus_mib * LOADED  # what reading a file leaves behind, beside the arrays
    split = cfg.split
    priors = {u: prior_size(n, split.prior_fraction, split.prior_count) for u, n in sizes.items()}
    prior = sum(priors.values())
    test = sum(min(round((n - priors[u]) * cfg.data.test_fraction), n - priors[u] - 1) for u, n in sizes.items())

    model = build_model(cfg.model, corpus)
    params = sum(int(v.numel()) for v in model.state_dict().values())
    model_mib = 4 * params / MIB
    width = sum(int(dict(model.named_parameters())[k].numel()) for k in attack_keys(model, cfg.model.attack_layers))
    sampled = min(users, max(int(users * cfg.fl.fraction_train), 1))
    full = needs_of(declarations, list(cfg.attack.suite), "full_updates")

    # the evaluation's largest batch of outputs: next-token logits (B x L x V) and a log-softmax chunk; a class
    # task keeps every example's scores
    outputs = int(np.prod(model(_dummy(corpus)).shape[1:])) if corpus.task == "next-token" else corpus.num_classes
    if corpus.task == "next-token":
        evaluation = (min(test, 512) * outputs * 4 + EVAL_CHUNK) / MIB
    else:
        evaluation = 3 * test * outputs * 4 / MIB
    shadow_round = 3 * users * width * 4 / MIB  # the shadow lane's reply, its checked arrays, the file written
    replies = 3 * sampled * model_mib  # the round's replies, their numpy views, the aggregate
    held = (sampled + cfg.shuffler.batch_min) * model_mib * (2 if full else 0)
    server = SERVER + corpus_mib * 2 + read + model_mib * 6 + replies + held + shadow_round + evaluation

    cpus = cpus or os.cpu_count() or 1
    actors = max(1, cpus // cfg.simulation.client_cpus)
    per_actor = ACTOR + (0.0 if lazy else corpus_mib * (1 + LOADED)) + 6 * model_mib

    # the lanes peak in the rounds (each shadow lane trains its share of a chunk of users at once) or in the fit after
    # them (the shadow lanes idle, workers.count lanes each holding every shadow and anonymous update)
    updates = cfg.fl.rounds * (users + sampled)  # shadow updates (one per known user a round) and anonymous ones
    fit = FIT_COPIES * updates * width * 4 / MIB
    shadows = shadow_lanes(cfg, cpus)
    shadow_lane = LANE + prior * example / MIB
    more_shadow = (shadows - 1) * (LANE_MORE + prior * example / MIB)
    share = -(-min(users, cfg.attack.shadow_batch_users or 1) // shadows)  # users of a chunk in one lane's share
    chunk = min(SHADOW_CHUNK / MIB, share * 4 * model_mib)
    lanes = shadow_lane + more_shadow + max(shadows * chunk, cfg.workers.count * (LANE_MORE + fit))

    return Estimate((
        Part("the launcher, Flower and Ray", LAUNCHER + corpus_mib * (1 + LOADED) + FLOWER + RAY, ("data.max_users",)),
        Part(f"ClientApp actors ({actors} x {per_actor / 1024:.1f} GiB)", actors * per_actor + IDLE,
             ("simulation.client_cpus", "data.max_users")),
        Part("ServerApp", server, _server_knobs(evaluation, held, replies)),
        Part(f"attack lanes ({shadows + cfg.workers.count})", lanes,
             ("workers.count", "workers.shadow_lanes", "model.attack_layers", "fl.rounds", "data.max_users")),
    ))


def _server_knobs(evaluation: float, held: float, replies: float) -> tuple[str, ...]:
    biggest = max((evaluation, "data.test_fraction"), (held, "shuffler.batch_min"), (replies, "fl.fraction_train"))
    return (biggest[1], "data.max_users")


def _dummy(corpus: object) -> object:
    import torch

    return torch.zeros((1, *corpus.input_shape), dtype=torch.long)  # type: ignore[attr-defined]


def check_memory(
    cfg: ExperimentConfig,
    fed: Federation,
    declarations: dict[str, Declaration],
    *,
    available: int | None = None,
    cpus: int | None = None,
) -> Estimate | None:
    """ConfigError (one line) when the run's estimate exceeds the machine's available memory (``available`` bytes;
    default ``psutil.virtual_memory().available``), naming what to lower; the estimate otherwise. Not checked in a
    process a leakbed launcher started (it checked before starting it) or with ``LEAKBED_MEMORY_CHECK=0``."""
    if available is None and (os.environ.get(MARK) or os.environ.get(SKIP_ENV, "") == "0"):
        return None
    est = estimate(cfg, fed, declarations, cpus)
    free = psutil.virtual_memory().available if available is None else available
    if est.total_mib * MIB <= free:
        return est
    top = max(est.parts, key=lambda p: p.mib)
    knobs = ", ".join(dict.fromkeys(top.lower))
    raise ConfigError(
        f"memory: this run needs about {est.total_mib / 1024:.1f} GiB ({est.line()}) and the machine "
        f"has {free / 2**30:.1f} GiB available; lower {knobs} (set {SKIP_ENV}=0 to run anyway)"
    )
