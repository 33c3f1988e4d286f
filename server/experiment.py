"""One FL run of an experiment under one prior rule, shared by every way of launching it.

The Ray simulation (``leakbed run``) and ``flwr run .`` (simulation or deployment) both call
``run_federation`` from their ServerApp main; nothing forks by mode.
"""

from __future__ import annotations

import json
import logging

from flwr.app import ArrayRecord, MetricRecord
from flwr.serverapp import Grid

from attacks import needs_full_updates
from attacks.suite import needs_participation
from core.adoption import defending_users
from core.config import ExperimentConfig
from core.derive import derived_seed
from core.layout import RunLayout
from server.dp import dp_fedavg_defense, privacy_summary, wrap_dp
from server.judge import Judge
from server.metrics import RunTelemetry, observe_round
from server.metrics import serve as serve_metrics
from server.run_parts import FIT_FAILED, Progress, prepare_run, train_config
from server.shuffler import Shuffler
from server.startup import bounded_start
from server.strategy import CuriousFedAvg

log = logging.getLogger(__name__)
__all__ = ["Progress", "run_federation"]


def run_federation(
    grid: Grid, cfg: ExperimentConfig, rule: str, layout: RunLayout, judge: Judge, progress: Progress | None = None
) -> dict:
    """Train with the curious strategy, fit the attacks, have ``judge`` score them; writes
    ``metrics.json`` into the prior's results folder."""
    run = prepare_run(cfg, rule, layout, progress)
    fed, out = run.fed, run.out
    serve_metrics(cfg.telemetry)
    tel = RunTelemetry(cfg, rule)

    def evaluate_fn(rnd: int, arrays: ArrayRecord) -> MetricRecord:
        utility = run.evaluate(rnd, arrays.to_torch_state_dict())
        tel.utility(utility["utility"])
        observe_round(tel, rnd, strategy.rounds.get(rnd), pool.stats, pool.depth())
        if cfg.attack.score_every and rnd and rnd % cfg.attack.score_every == 0 and rnd < cfg.fl.rounds:
            pool.score([*cfg.attack.attackers, *cfg.attack.suite])  # interim scores for the privacy-over-rounds gauges
        return MetricRecord(utility)

    def interim_score(name: str, partial: bool) -> None:
        if partial:
            tel.attack(name, judge.interim(name))

    pool = run.pool(
        addresses=cfg.attack.worker_addresses,
        retry_seconds=cfg.attack.retry_seconds,
        on_fit=interim_score,
    )
    tel.confined(pool.sandboxed or not pool.local)
    try:
        shuffler = Shuffler(
            run.sealer,
            run.keys,
            full_updates=needs_full_updates(cfg.attack.suite),
            batch_min=cfg.shuffler.batch_min,
            reference=cfg.shuffler.reference,
        )
        strategy = CuriousFedAvg(
            shuffler=shuffler,
            pool=pool,
            seed=derived_seed(cfg.seed, "sampling"),
            max_reply_bytes=int(cfg.fl.max_reply_mb * 2**20),
            startup_timeout=cfg.fl.startup_timeout,
            uniform_weights=dp_fedavg_defense(cfg) is not None,
            share_participation=needs_participation(cfg.attack.suite),
            fraction_train=cfg.fl.fraction_train,
            fraction_evaluate=0.0,
            min_train_nodes=1,
            min_evaluate_nodes=0,
            min_available_nodes=len(fed.user_ids),
        )
        runner = wrap_dp(strategy, cfg, len(fed.user_ids))  # dp-fedavg: Flower's DP wrapper adds the noise
        run.timed(
            "fl",
            lambda: runner.start(
                grid=bounded_start(grid, cfg.fl.startup_timeout),  # no device ever answering fails round 1
                initial_arrays=ArrayRecord(run.model.state_dict()),
                num_rounds=cfg.fl.rounds,
                timeout=cfg.fl.round_timeout,
                train_config=train_config(cfg, rule),
                evaluate_fn=evaluate_fn,
            ),
        )
        run.timed("attack_fit", lambda: pool.fit([*cfg.attack.attackers, *cfg.attack.suite]))
    finally:
        pool.close()
    scored = run.fitted(pool, cfg.attack.attackers)
    defending = defending_users(cfg, fed.user_ids)
    groups = {"defending": defending, "not defending": set(fed.user_ids) - defending} if cfg.defenses else None
    metrics = judge.attackers(scored, groups)
    suite_ok = run.fitted(pool, cfg.attack.suite)
    suite = judge.suite(suite_ok)
    failed = {name: FIT_FAILED for name in [*cfg.attack.attackers, *cfg.attack.suite] if name not in [*scored, *suite_ok]}
    summary = {
        **run.summary(pool),
        "attackers": metrics,
        "attackers_failed": failed,
        "suite": suite,
        # attacks by adversarial participants (devices), reported apart from the server's
        "participant_attacks": judge.participants(),
        "rounds_log": {str(r): vars(s) for r, s in sorted(strategy.rounds.items())},
        "privacy": privacy_summary(cfg, fed.user_ids, getattr(runner, "releases", 0)),
        "shuffler": shuffler.batching.stats.to_dict(),
    }
    (out / "metrics.json").write_text(json.dumps(summary, indent=2, default=float))
    for name, result in {**metrics, **suite}.items():
        tel.attack(name, result)
    tel.pool(pool.stats, 0)
    tel.finished(out)
    return summary
