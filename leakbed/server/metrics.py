"""Server-side instrumentation: sets the catalogue's metrics (``core.telemetry``) for one FL run.

Labels are bounded: the prior rule, the attack name, a short label of the config's defense set,
the world (closed/open), who scored it (``scorer``: referee or plugin), the failure reason. Never a
user, node or update id. A plugin-scored attack's gauges say ``scorer="plugin"``, and its scorer's
exports go under its own name (``attack="<attack>/<export>"``, the export's name escaped for a label by
``core.plugin_text``): they can never set another attack's series.

Final values are kept two ways: the /metrics endpoint stays up ``telemetry.hold_seconds`` after
the run (so a scrape after the end still finds them), and ``metrics.prom`` in the run folder holds
the last exposition in the Prometheus text format.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from pathlib import Path

from leakbed.core import telemetry as t
from leakbed.core.audit import VIEWS
from leakbed.core.config import ExperimentConfig, TelemetryConfig
from leakbed.core.plugin_text import plugin_text
from leakbed.workers import PoolStats

log = logging.getLogger(__name__)
_endpoint: t.MetricsEndpoint | None = None
_endpoint_lock = threading.Lock()
WORLDS = {"open-world": "open"}  # every other attack is scored in the closed world


def defense_label(cfg: ExperimentConfig) -> str:
    """``none``, or the defense names joined by ``+`` in config order (a small, bounded set)."""
    return "+".join(d.name for d in cfg.defenses) or "none"


def serve(tcfg: TelemetryConfig) -> t.MetricsEndpoint | None:
    """Start the ServerApp's /metrics once per process (``telemetry.port`` 0: none)."""
    global _endpoint
    with _endpoint_lock:
        if _endpoint is None and tcfg.port:
            _endpoint = t.start_http_server(tcfg.port, tcfg.host, registry=t.SERVER_REGISTRY)
            log.info("Prometheus metrics on http://%s:%d/metrics", tcfg.host, tcfg.port)
        return _endpoint


def hold(tcfg: TelemetryConfig) -> None:
    """Keep the endpoint up after the run so a final scrape still finds the end values."""
    if _endpoint is not None and tcfg.hold_seconds > 0:
        log.info("holding /metrics for %.0fs", tcfg.hold_seconds)
        time.sleep(tcfg.hold_seconds)


class RunTelemetry:
    """The metrics of one FL run under one prior."""

    def __init__(self, cfg: ExperimentConfig, prior: str) -> None:
        self.prior = prior
        self.defense = defense_label(cfg)
        self._seen = PoolStats()
        self._lock = threading.Lock()
        t.forget_prior(prior)  # a second run in this process (a sweep, a test) must not add to the first's counts
        t.ROUNDS_PLANNED.labels(prior=prior).set(cfg.fl.rounds)
        t.RUN_FINISHED.labels(prior=prior).set(0)
        t.ROUND.labels(prior=prior).set(0)
        # Children exist from the start, so dashboards and rate() see 0 rather than no series.
        for metric in (t.UPDATES_RECEIVED, t.UPDATES_TAPPED, t.UPDATES_ANALYSED, t.UPDATES_DROPPED):
            metric.labels(prior=prior)
        for reason in ("error", "rejected"):
            t.UPDATES_FAILED.labels(prior=prior, reason=reason)

    def round_done(self, rnd: int, received: int, errors: int, rejected: int, seconds: float, aggregation: float) -> None:
        """A server round finished: replies, failures (errors and missing replies) and durations."""
        p = self.prior
        t.ROUND.labels(prior=p).set(rnd)
        t.UPDATES_RECEIVED.labels(prior=p).inc(received)
        t.UPDATES_FAILED.labels(prior=p, reason="error").inc(errors)
        t.UPDATES_FAILED.labels(prior=p, reason="rejected").inc(rejected)
        t.ROUND_DURATION.labels(prior=p).observe(seconds)
        t.AGGREGATION_DURATION.labels(prior=p).observe(aggregation)

    def confined(self, confined: bool) -> None:
        """Whether this run's attack code runs confined (``leakbed_attack_sandboxed``, the exposition's first metric)."""
        t.ATTACK_SANDBOXED.labels(prior=self.prior).set(1 if confined else 0)

    def pool(self, stats: PoolStats, depth: int) -> None:
        """Mirror the pool's cumulative counts into the counters (by increments) and its queue gauges."""
        with self._lock:
            p, seen = self.prior, self._seen
            t.UPDATES_TAPPED.labels(prior=p).inc(max(0, stats.tapped - seen.tapped))
            t.UPDATES_ANALYSED.labels(prior=p).inc(max(0, stats.analysed - seen.analysed))
            t.UPDATES_DROPPED.labels(prior=p).inc(max(0, stats.dropped - seen.dropped))
            # updates the attack side failed on were tapped but never analysed: counted with the errors
            t.UPDATES_FAILED.labels(prior=p, reason="error").inc(max(0, stats.failed - seen.failed))
            seen.tapped, seen.analysed, seen.dropped, seen.failed = stats.tapped, stats.analysed, stats.dropped, stats.failed
            t.ATTACK_QUEUE_DEPTH.labels(prior=p).set(depth)
            t.ATTACK_LAG_ROUNDS.labels(prior=p).set(stats.lag_rounds)

    def utility(self, value: float) -> None:
        t.UTILITY.labels(prior=self.prior, defense=self.defense).set(value)

    def attack(self, name: str, metrics: dict) -> None:
        """An attack's score (interim or final): AP, × chance, top-1; AUC for property attacks; matched and count-based
        per-sample accuracy for the reconstruction attacks; its exports (e.g. metadata fused with a weight attacker).
        A plugin-scored attack's are marked ``scorer="plugin"``, its exports filed under its own name."""
        plugin = metrics.get("scored_by") == "plugin"
        scorer = "plugin" if plugin else "referee"
        self._gauges(name, WORLDS.get(name, "closed"), scorer, metrics)
        exports = metrics.get("exports")
        for sub, sub_metrics in (exports if isinstance(exports, dict) else {}).items():
            if isinstance(sub_metrics, dict):  # the referee's exports are named by it; a plugin's go under its own name
                label = f"{name}/{plugin_text(sub, 'prometheus', 64)}" if plugin else sub
                self._gauges(label, WORLDS.get(name, "closed"), scorer, sub_metrics)

    def _gauges(self, name: str, world: str, scorer: str, metrics: dict) -> None:
        labels = {"attack": plugin_text(name, "prometheus", 140), "defense": self.defense, "world": world,
                  "prior": self.prior, "scorer": scorer}  # fmt: skip
        gauges = (("ap", t.ATTACK_AP), ("x_chance", t.ATTACK_X_CHANCE), ("top1", t.ATTACK_TOP1), ("auc", t.ATTACK_AUC))
        gauges += (("accuracy", t.ATTACK_SAMPLE_ACCURACY), ("count_accuracy", t.ATTACK_COUNT_ACCURACY))  # reconstruction
        for key, gauge in gauges:
            value = _finite(metrics.get(key))
            if value is not None:
                gauge.labels(**labels).set(value)

    def audit(self, summary: dict) -> None:
        """The audit (``server.canaries.audit_summary``): the accountant's ε, the exact one and the Poisson
        approximation, each view's ε_emp with its interval and the one-run bound with its ceiling, and the flag; bounded
        labels."""
        labels = {"prior": self.prior, "defense": self.defense}

        def put(estimate: str, view: str, value: float | None) -> None:
            t.PRIVACY_EPSILON.labels(**labels, estimate=estimate, view=view).set(float("inf") if value is None else float(value))

        for estimate, key in (("accountant", "epsilon_accountant"), ("exact", "epsilon_exact"),
                              ("poisson-approximation", "epsilon_poisson_approximation")):  # fmt: skip
            if key in summary:
                put(estimate, "mechanism", summary[key])
        for view in VIEWS:
            est = summary.get(view)
            if est:
                name = view.replace(" (max)", "-max").replace(" ", "-")
                put("emp", name, est["epsilon_emp"])
                put("emp-lower", name, est["interval"][0])
                put("emp-upper", name, est["interval"][1])
                put("lower-bound", name, est["epsilon_lower_bound"])
                put("lower-bound-ceiling", name, est["lower_bound_ceiling"])
        t.PRIVACY_FLAGGED.labels(**labels).set(1 if summary.get("flagged") else 0)

    def finished(self, run_dir: Path) -> None:
        """Mark the run done and keep the final exposition next to its metrics.json."""
        t.RUN_FINISHED.labels(prior=self.prior).set(1)
        t.ATTACK_QUEUE_DEPTH.labels(prior=self.prior).set(0)
        (run_dir / "metrics.prom").write_text(t.exposition(t.SERVER_REGISTRY), encoding="utf-8")


def _finite(value: object) -> float | None:
    """A gauge's value: a finite float, or None (not a number, a bool, NaN, or an integer no float holds)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def observe_round(tel: RunTelemetry, rnd: int, log_: object | None, stats: PoolStats, depth: int) -> None:
    """After round ``rnd``'s aggregation: its reply counts and durations (a ``RoundLog``), and the pool's state."""
    if rnd > 0 and log_ is not None:  # ``failed`` counts error replies and sampled devices that never answered
        tel.round_done(rnd, log_.received, log_.failed, log_.rejected, log_.seconds, log_.aggregation_seconds)
    tel.pool(stats, depth)
