"""An audited federation at a size a test affords, through the real mechanism: the product's server halves (Flower's DP
wrapper, a defense plugin's), every reply (a device's and a canary's) through the defenses' own device Mods as the
plan they are sent says, the referee's canaries, a noise secret, the audit's summary. Devices send random updates
(N(0, step²) per entry) instead of training, so a round costs milliseconds. The privacy audit's tests
(tests/server/test_canaries.py), its coverage over seeds (``leakbed.reference.audit_coverage``) and its cost per round
(benchmarks/audit_cost.py) run it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, Metadata, MetricRecord, RecordDict
from flwr.serverapp.strategy import FedAvg
from flwr.supercore.task_identity import TaskIdentity

from leakbed.core.config import ExperimentConfig, build_config
from leakbed.core.derive import derived_seed
from leakbed.core.plan import PLAN_KEY
from leakbed.referee.canaries import CanaryAudit
from leakbed.server.canaries import CanaryStrategy, audit_summary, canary_audit
from leakbed.server.plan import device_plan
from leakbed.server_defenses import ServerDefenses

USERS, SAMPLED, ROUNDS = 100, 20, 10
SHAPE = (200, 100)  # a Linear(100, 200): d = 20,200 float entries


@dataclass(frozen=True)
class Size:
    """The federation: its users, the devices sampled a round, the model (a Linear layer of ``shape``)."""

    users: int = USERS
    sampled: int = SAMPLED
    shape: tuple[int, int] = SHAPE


class Grid:
    def __init__(self, nodes: int) -> None:
        self.nodes = nodes

    def get_node_ids(self) -> list[int]:
        return list(range(1, self.nodes + 1))


def identity() -> None:
    """The task identity a SuperLink would set (Flower's DP wrapper reads it)."""
    TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = 1, 0, 1


def arrays_of(arrays: dict[str, np.ndarray]) -> ArrayRecord:
    return ArrayRecord(torch_state_dict={k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()})


def as_received(content: RecordDict, src: int) -> Message:
    """A reply as if it had crossed the SuperLink (metadata filled in)."""
    meta = Metadata(run_id=1, message_id=f"m{src}", src_node_id=src, dst_node_id=0, reply_to_message_id="i",
                    group_id="1", created_at=time.time(), ttl=60, message_type="train")  # fmt: skip
    return Message(content=content, metadata=meta)


def config(defense: str = 'dp-fedavg", clip=0.5, noise_multiplier=1.0', seed: int = 0, canaries: int = 128,
           rounds: int = ROUNDS, size: Size = Size(), **audit: float) -> ExperimentConfig:  # fmt: skip
    """An experiment with one defense entry (``name", params`` as TOML after ``name="``; '' = none) and an audit."""
    sets = [f"seed={seed}", f"fl.rounds={rounds}", f"fl.fraction_train={size.sampled / size.users}",
            f"audit.canaries={canaries}", *(f"audit.{k}={v}" for k, v in audit.items())]
    if defense:
        sets.append(f'defenses=[{{name="{defense}}}]')
    return build_config({}, sets)


@dataclass
class AuditedRun:
    summary: dict
    privacy: list[dict]
    released: list[dict[str, np.ndarray]] = field(default_factory=list)  # each round's new global model
    averaged: list[dict[str, np.ndarray]] = field(default_factory=list)  # each round's plain mean of the replies
    aggregation_seconds: list[float] = field(default_factory=list)  # each round's aggregation (canaries and audit in)


def _device(update: dict[str, np.ndarray], metrics: MetricRecord):  # noqa: ANN202 - a ClientApp handler
    def run(msg: Message, _context: Context) -> Message:
        sent = msg.content.array_records["arrays"]
        arrays = ArrayRecord({k: Array(v.numpy() + update[k]) for k, v in sent.items()})
        return Message(RecordDict({"arrays": arrays, "metrics": MetricRecord(dict(metrics))}), reply_to=msg)

    return run


def audited_run(cfg: ExperimentConfig, noise_secret: int | None = 0, step: float = 0.01, keep: bool = False,
                size: Size = Size()) -> AuditedRun:  # fmt: skip
    """``cfg.fl.rounds`` rounds of ``size.sampled`` devices of ``size.users`` and the inserted canaries (none when
    ``audit.canaries`` is 0); the audit's summary (with the released models and the pre-noise means when ``keep``)."""
    torch.manual_seed(cfg.seed)
    model = torch.nn.Linear(size.shape[1], size.shape[0])
    halves = ServerDefenses(cfg)
    audit = canary_audit(cfg, model, halves, lambda keys, shapes, norm: CanaryAudit(
        cfg.audit.canaries, cfg.audit.rate, norm, keys, shapes, derived_seed(cfg.seed, "audit")))  # as RunJudge makes it
    users = [f"u{i}" for i in range(size.users)]
    plan = device_plan(cfg, "random", users).model_copy(update={"noise_secret": noise_secret})
    fedavg = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=1, min_evaluate_nodes=0, min_available_nodes=1)
    canaries = audit.per_round if cfg.audit.canaries else 0
    inner = halves.wrap(fedavg, users, size.sampled, canaries, noise_secret)
    strategy = CanaryStrategy(inner, audit, halves) if cfg.audit.canaries else inner
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    rng = np.random.default_rng([cfg.seed, 5])
    out = AuditedRun({}, [])
    metrics = MetricRecord({"num-examples": 1})
    for rnd in range(1, cfg.fl.rounds + 1):
        config_record = ConfigRecord({"lr": 0.1, PLAN_KEY: plan.model_dump_json()})
        messages = list(strategy.configure_train(rnd, arrays_of(state), config_record, Grid(size.sampled)))
        replies = []
        for node, train in enumerate(messages):
            update = {k: rng.normal(0.0, step, v.shape).astype(np.float32) for k, v in state.items()}
            reply = halves.canary(train, _device(update, metrics), rnd, 100_000 + node)  # the same device Mods
            replies.append(as_received(reply.content, node + 1))
        if keep:  # what the replies average to before the noise: the real ones, and the canaries through their Mods
            joined = [strategy._reply(rnd, int(j), metrics) for j in audit.joining(rnd)] if canaries else []
            every = [r.content.array_records["arrays"] for r in [*replies, *joined]]
            out.averaged.append({k: np.mean([a[k].numpy() for a in every], axis=0) for k in state})
        t0 = time.perf_counter()
        arrays, _ = strategy.aggregate_train(rnd, replies)
        out.aggregation_seconds.append(time.perf_counter() - t0)
        assert arrays is not None
        state = {k: v.numpy() for k, v in arrays.items()}
        if keep:
            out.released.append(state)
    out.privacy = halves.privacy(users, size.sampled, cfg.fl.rounds, canaries)
    out.summary = audit_summary(audit, out.privacy, cfg, size.users) if canaries else {}
    return out
