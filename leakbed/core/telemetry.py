"""The Prometheus metric catalogue: every metric the ServerApp exports, the attack workers' included.

Defined once, here, so exporters and the Grafana dashboard agree on names. Naming follows
Prometheus conventions (``leakbed_`` prefix, base units, ``_total`` counters). Labels are bounded
sets (prior rule, attacker name, defense label, world, who scored it, failure reason, task kind,
outcome) and never carry a user, node or update id: the metrics are public, the ground truth is not.
An attack's gauges carry ``scorer``: ``referee`` (leakbed's scorer kinds) or ``plugin`` (the
attack's own scorer: its numbers, not the referee's, its exports under its own name).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from threading import Thread
from typing import TypeVar
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import start_http_server as _start_http_server
from prometheus_client.metrics import MetricWrapperBase

M = TypeVar("M", bound=MetricWrapperBase)

SERVER_REGISTRY = CollectorRegistry(auto_describe=True)

ATTACK_LABELS = ("attack", "defense", "world", "prior", "scorer")
SCORERS = ("referee", "plugin")  # the scorer label's values
# Rounds take seconds (tiny CNN on CPU) to many minutes (MobileNet, hundreds of clients).
ROUND_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, float("inf"))
FAST_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, float("inf"))


# Every ServerApp metric carries a ``prior`` label; kept here so a new run can clear its own series.
SERVER_METRICS: list[MetricWrapperBase] = []


def _server(metric: M) -> M:
    SERVER_METRICS.append(metric)
    return metric


def _server_gauge(name: str, doc: str, labels: Iterable[str] = ("prior",)) -> Gauge:
    return _server(Gauge(name, doc, tuple(labels), registry=SERVER_REGISTRY))


def _server_counter(name: str, doc: str, labels: Iterable[str] = ("prior",)) -> Counter:
    return _server(Counter(name, doc, tuple(labels), registry=SERVER_REGISTRY))


def _server_histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
    return _server(Histogram(name, doc, ("prior",), buckets=buckets, registry=SERVER_REGISTRY))


# --- ServerApp -------------------------------------------------------------------------------
# first in the exposition: whether the attack code of this run ran confined
ATTACK_SANDBOXED = _server_gauge(
    "leakbed_attack_sandboxed",
    "1 when the attack code runs confined (local workers in the sandbox, or remote workers), 0 when it runs "
    "unsandboxed beside the truth [bool].",
)
ROUND = _server_gauge("leakbed_round", "Last finished server round [round].")
ROUNDS_PLANNED = _server_gauge("leakbed_rounds_planned", "Server rounds planned for the run [rounds].")
RUN_FINISHED = _server_gauge("leakbed_run_finished", "1 once the FL run and the final attack scoring are done [bool].")
UPDATES_RECEIVED = _server_counter("leakbed_updates_received", "Client replies received by the strategy [updates].")
UPDATES_FAILED = _server_counter(
    "leakbed_updates_failed",
    "Client replies not aggregated: reason=error (the node failed) or rejected (malformed) [updates].",
    ("prior", "reason"),
)
UPDATES_TAPPED = _server_counter("leakbed_updates_tapped", "Anonymous updates handed to the attack pool [updates].")
UPDATES_ANALYSED = _server_counter("leakbed_updates_analysed", "Tapped updates acknowledged by an attack worker [updates].")
UPDATES_DROPPED = _server_counter(
    "leakbed_updates_dropped", "Tapped updates dropped because the attack queue stayed full [updates]."
)
ROUND_DURATION = _server_histogram("leakbed_round_duration_seconds", "Wall time of one server round [s].", ROUND_BUCKETS)
AGGREGATION_DURATION = _server_histogram(
    "leakbed_aggregation_duration_seconds", "Wall time of one round's aggregation including the tap [s].", FAST_BUCKETS
)
ATTACK_QUEUE_DEPTH = _server_gauge("leakbed_attack_queue_depth", "Tasks waiting in the bounded attack queue [tasks].")
ATTACK_LAG_ROUNDS = _server_gauge("leakbed_attack_lag_rounds", "How many rounds the attack side trails the FL run [rounds].")
UTILITY = _server_gauge("leakbed_utility", "Utility of the global model on held-out data [ratio].", ("prior", "defense"))
PRIVACY_EPSILON = _server_gauge(
    "leakbed_privacy_epsilon",
    "ε of the run's privacy: the DP defense's claim (estimate=accountant: Flower's RDP), its exact value (exact: PLD) "
    "and the Poisson-sampling approximation (poisson-approximation) under view=mechanism; the canary audit's ε_emp "
    "(emp) with its 90% interval (emp-lower, emp-upper), Steinke et al.'s one-run lower bound (lower-bound) and the "
    "most it can show with the run's canaries (lower-bound-ceiling) per view (final-model, all-iterates, "
    "all-iterates-max); +Inf without a finite guarantee [epsilon].",
    ("prior", "defense", "estimate", "view"),
)
PRIVACY_FLAGGED = _server_gauge(
    "leakbed_privacy_flagged",
    "1 when the canary audit's ε_emp interval lies wholly above the accountant's ε: the run leaks more than its DP "
    "claims [bool].",
    ("prior", "defense"),
)
ATTACK_AP = _server_gauge("leakbed_attack_ap", "Mean average precision of the attack [ratio].", ATTACK_LABELS)
ATTACK_X_CHANCE = _server_gauge("leakbed_attack_x_chance", "Attack AP divided by chance AP [multiple].", ATTACK_LABELS)
ATTACK_TOP1 = _server_gauge("leakbed_attack_top1", "Top-1 accuracy of the attack [ratio].", ATTACK_LABELS)
ATTACK_AUC = _server_gauge("leakbed_attack_auc", "ROC AUC of a property or membership attack [ratio].", ATTACK_LABELS)
ATTACK_SAMPLE_ACCURACY = _server_gauge(
    "leakbed_attack_sample_accuracy",
    "Per-sample property accuracy of a reconstruction attack, Hungarian-matched to the true samples [ratio].",
    ATTACK_LABELS,
)
ATTACK_COUNT_ACCURACY = _server_gauge(
    "leakbed_attack_count_accuracy",
    "Per-sample property accuracy of a reconstruction attack from property counts, without matching [ratio].",
    ATTACK_LABELS,
)

# --- attack workers: counted by the pool from each worker's acknowledgement (a sandboxed worker has no network)
WORKER_TASKS = Counter(
    "leakbed_worker_tasks", "Tasks the attack workers handled [tasks].", ("kind", "outcome"), registry=SERVER_REGISTRY
)
WORKER_TASK_DURATION = Histogram(
    "leakbed_worker_task_duration_seconds",
    "Wall time of one attack task [s].",
    ("kind",),
    buckets=FAST_BUCKETS,
    registry=SERVER_REGISTRY,
)
WORKER_UPDATES_STORED = Counter(
    "leakbed_worker_updates_stored", "Anonymous updates the attack workers filed [updates].", registry=SERVER_REGISTRY
)
WORKER_DUPLICATES = Counter(
    "leakbed_worker_duplicates",
    "Updates delivered again (at-least-once) and de-duplicated by update id [updates].",
    registry=SERVER_REGISTRY,
)


def metric_names(registry: CollectorRegistry = SERVER_REGISTRY) -> list[str]:
    """Every exported metric family name as written in PromQL (counters with ``_total``): what the dashboard may reference."""
    return sorted(f"{family.name}_total" if family.type == "counter" else family.name for family in registry.collect())


def forget_prior(prior: str) -> None:
    """Remove every ServerApp series of ``prior``, so a new run in the same process counts from zero.

    Prometheus reads a counter that drops as a reset (as after a restart), so ``rate()`` stays right.
    """
    for metric in SERVER_METRICS:
        for family in metric.collect():
            stale = {tuple(v for k, v in s.labels.items() if k != "le") for s in family.samples if s.labels.get("prior") == prior}
            for values in stale:
                metric.remove(*values)


def exposition(registry: CollectorRegistry) -> str:
    """The registry in the Prometheus text format (what /metrics serves)."""
    return generate_latest(registry).decode("utf-8")


@dataclass
class MetricsEndpoint:
    """A running /metrics HTTP server; ``close`` stops it."""

    server: WSGIServer
    thread: Thread

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def start_http_server(port: int, addr: str = "127.0.0.1", registry: CollectorRegistry = SERVER_REGISTRY) -> MetricsEndpoint:
    """Serve ``registry`` on ``http://addr:port/metrics`` from a daemon thread (port 0 = any free port)."""
    server, thread = _start_http_server(port, addr=addr, registry=registry)
    return MetricsEndpoint(server, thread)
