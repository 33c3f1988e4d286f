"""One FL run of an experiment under one prior rule: the run's one loop, whatever launched it.

Flower's ``Strategy.start`` drives the rounds. The strategy is the curious tap (``server.tap``) around the
defenses' server halves (``server.halves``: DP-FedAvg's noise) around Flower's FedAvg. Under SecAgg+ the
same loop runs on a grid that answers each round's train messages with the protocol's aggregate
(``server.secagg``), so only the attacks that read aggregates are fitted there. Every way of launching a
run (``leakbed run``, ``flwr run``, a deployment) calls ``run_federation`` from the ServerApp's main.
"""

from __future__ import annotations

import json
import logging
import time

from flwr.app import ArrayRecord, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg

from leakbed.core.adoption import defending_users
from leakbed.core.config import ExperimentConfig
from leakbed.core.declaration import Declaration, needs_of, plugin_scored, reid_names
from leakbed.core.derive import derived_seed
from leakbed.core.layout import RunLayout
from leakbed.server.canaries import Auditor, CanaryStrategy, audit_summary, canary_audit
from leakbed.server.halves import ServerHalves
from leakbed.server.judge import Judge
from leakbed.server.memory_probe import MemoryProbe
from leakbed.server.metrics import RunTelemetry, observe_round
from leakbed.server.metrics import serve as serve_metrics
from leakbed.server.plan import sampled_per_round
from leakbed.server.run_parts import FIT_FAILED, Progress, RunParts, evaluation_threads, prepare_run, train_config
from leakbed.server.sampling import TicketSampler
from leakbed.server.secagg import CANNOT_RUN, SecAggGrid
from leakbed.server.shuffler import Shuffler
from leakbed.server.startup import bounded_start
from leakbed.server.tap import CuriousTap
from leakbed.workers import AttackPool

log = logging.getLogger(__name__)
__all__ = ["Progress", "run_federation"]


def runnable(cfg: ExperimentConfig, declarations: dict[str, Declaration]) -> list[str]:
    """The suite's attacks this run can serve: all of them, or under SecAgg+ those that read aggregates (the
    preflight refuses a suite with others, so this only guards a run started without it)."""
    if cfg.fl.secure_aggregation != "secagg+":
        return list(cfg.attack.suite)
    return [n for n in cfg.attack.suite if declarations[n].needs.level == "aggregate"]


def build_tap(
    run: RunParts, halves: ServerHalves, pool: AttackPool, names: list[str], audit: Auditor | None = None,
    noise_secret: int | None = None,
) -> CuriousTap:
    """The curious tap around the audit's canaries (if any) around the defenses' server halves (their DP noise drawn
    from ``noise_secret``) around FedAvg; the tap samples each round's cohort and the inner FedAvg takes all of it
    (and the round's canaries)."""
    cfg, users = run.cfg, run.fed.user_ids
    fedavg = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=1, min_evaluate_nodes=0, min_available_nodes=1)
    shuffler = Shuffler(
        run.sealer,
        run.keys,
        full_updates=needs_of(run.declarations, names, "full_updates"),
        batch_min=cfg.shuffler.batch_min,
        reference=cfg.shuffler.reference,
    )
    sampler = TicketSampler(
        derived_seed(cfg.seed, "sampling"),
        derived_seed(cfg.seed, "node-ids"),
        cfg.fl.fraction_train,
        len(users),
        cfg.fl.startup_timeout,
    )
    inner = halves.wrap(fedavg, users, sampled_per_round(cfg, len(users)), audit.per_round if audit else 0, noise_secret)
    return CuriousTap(
        CanaryStrategy(inner, audit, halves) if audit else inner,
        sampler=sampler,
        shuffler=shuffler,
        pool=pool,
        uniform_weights=halves.uniform_weights,
        max_reply_bytes=int(cfg.fl.max_reply_mb * 2**20),
        share_participation=needs_of(run.declarations, names, "participation"),
        timeout=cfg.fl.round_timeout,
    )


def replies(rounds: dict, users_sealed: int, users: int, max_failed_share: float) -> dict:
    """How many of the sampled devices' replies failed or were rejected, why (the reasons, counted), and how many
    users the numbers rest on: what every report, the console and ``metrics.json`` state first."""
    sampled = sum(r.sampled for r in rounds.values())
    failed = sum(r.failed for r in rounds.values())
    rejected = sum(r.rejected for r in rounds.values())
    why: dict[str, int] = {}
    for r in rounds.values():
        for reason in r.reasons:
            key = reason[:200]
            why[key] = why.get(key, 0) + 1
    share = (failed + rejected) / sampled if sampled else 0.0
    return {
        "sampled": sampled,
        "failed": failed,
        "rejected": rejected,
        "used": sampled - failed - rejected,
        "failed_share": share,
        "max_failed_share": max_failed_share,
        "too_many_failed": share > max_failed_share,
        "why": dict(sorted(why.items(), key=lambda kv: -kv[1])[:20]),
        "users": users,
        "users_in_updates": users_sealed,
    }


def run_federation(
    grid: Grid,
    cfg: ExperimentConfig,
    rule: str,
    layout: RunLayout,
    judge: Judge,
    halves: ServerHalves,
    declarations: dict[str, Declaration],
    progress: Progress | None = None,
) -> dict:
    """Train with the curious tap, fit the attacks (each in its own sandbox: ``declarations`` say what they are), have
    ``judge`` score them; writes ``metrics.json`` into the prior's results folder and returns it."""
    probe = MemoryProbe()  # off unless LEAKBED_MEMORY_PROBE names a file (benchmarks.memory)
    run = prepare_run(cfg, rule, layout, declarations, progress)
    noise_secret = judge.noise_secret()  # the referee's: DP noise is drawn from it, never from the config's seed
    run.plan = run.plan.model_copy(update={"noise_secret": noise_secret})
    probe.mark("prepare run (federation, model, test set)")
    users = run.fed.user_ids
    serve_metrics(cfg.telemetry)
    tel = RunTelemetry(cfg, rule)
    names = runnable(cfg, declarations)
    secagg = cfg.fl.secure_aggregation == "secagg+"

    def evaluate_fn(rnd: int, arrays: ArrayRecord) -> MetricRecord:
        probe.mark("round: train, tap, shuffle, aggregate", rnd)
        t0 = time.perf_counter()
        utility = run.evaluate(rnd, arrays.to_torch_state_dict())
        if rnd in tap.rounds:
            tap.rounds[rnd].evaluation_seconds = time.perf_counter() - t0
        probe.mark("evaluation", rnd, pool_depth=pool.depth(), threads=evaluation_threads(cfg, run.device))
        tel.utility(utility["utility"])
        observe_round(tel, rnd, tap.rounds.get(rnd), pool.stats, pool.depth())
        if cfg.attack.score_every and rnd and rnd % cfg.attack.score_every == 0 and rnd < cfg.fl.rounds and interim:
            pool.score(interim)  # interim scores for the privacy-over-rounds gauges
        return MetricRecord(utility)

    # a plugin's own scorer is handed its truth only once no lane of this prior can run (after the pool closed): no
    # interim score runs it, so a lane can never run beside a scoring sandbox that holds the truth
    interim = [n for n in names if declarations[n].scoring.kind != "plugin"]

    def interim_score(name: str, partial: bool) -> None:
        if partial and name in interim:
            tel.attack(name, judge.interim(name))

    pool = run.pool(names, on_fit=interim_score)
    probe.mark("attack pool start")
    tel.confined(pool.sandboxed or not pool.local)
    audit = canary_audit(cfg, run.model, halves, judge.canaries) if cfg.audit.canaries and not secagg else None
    try:
        tap = build_tap(run, halves, pool, names, audit, noise_secret)
        loop_grid = SecAggGrid(grid, cfg.fl.secagg, cfg.fl.round_timeout) if secagg else grid
        run.timed(
            "fl",
            lambda: tap.start(
                grid=bounded_start(loop_grid, cfg.fl.startup_timeout),  # no device ever answering fails round 1
                initial_arrays=ArrayRecord(run.model.state_dict()),
                num_rounds=cfg.fl.rounds,
                timeout=cfg.fl.round_timeout,
                train_config=train_config(cfg, run.plan),
                evaluate_fn=evaluate_fn,
            ),
        )
        run.timed("attack_fit", lambda: pool.fit(names))
        probe.mark("attack drain and fit")
    finally:
        pool.close()
    fitted = run.fitted(pool, names)
    defending = defending_users(cfg, users)
    groups = {"defending": defending, "not defending": set(users) - defending} if cfg.defenses else None
    scores = judge.score(fitted, groups)
    failed = {n: CANNOT_RUN for n in cfg.attack.suite if n not in names} | {n: FIT_FAILED for n in names if n not in fitted}
    failed |= {n: s["scorer_failed"] for n, s in scores.items() if "scorer_failed" in s}
    scores = {n: s for n, s in scores.items() if n not in failed}
    reid = reid_names(declarations, list(scores))  # the referee's: a plugin-scored attack is never in the table
    plugin = plugin_scored(declarations, list(scores))
    summary = {
        "replies": replies(tap.rounds, judge.users_sealed(), len(users), cfg.fl.max_failed_share),
        **run.summary(pool),
        **({"secure_aggregation": "secagg+"} if secagg else {}),
        "attackers": {n: scores[n] for n in reid},  # the closed-world table (seed 001 Table 3)
        "attackers_failed": failed,
        "suite": {n: s for n, s in scores.items() if n not in reid and n not in plugin},
        # scored by the attacks' own scorers in the scoring sandbox: their numbers, not the referee's, reported apart
        "plugin_scored": {n: scores[n] for n in plugin},
        # attacks by adversarial participants (devices), reported apart from the server's
        "participant_attacks": judge.participants(),
        "rounds_log": {str(r): vars(s) for r, s in sorted(tap.rounds.items())},
        "privacy": (privacy := halves.privacy(users, sampled_per_round(cfg, len(users)), tap.releases,
                                              audit.per_round if audit else 0)),
        **({"audit": audit_summary(audit, privacy, cfg, len(users))} if audit else {}),
        "shuffler": tap.shuffler_stats(),
    }
    (run.out / "metrics.json").write_text(json.dumps(summary, indent=2, default=float))
    probe.mark("scoring")
    for name, result in scores.items():
        tel.attack(name, result)
    if "audit" in summary:
        tel.audit(summary["audit"])
    tel.pool(pool.stats, 0)
    tel.finished(run.out)
    return summary
