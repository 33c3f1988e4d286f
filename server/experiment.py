"""One FL run of an experiment under one prior rule, shared by every way of launching it.

The Ray simulation (``leakbed run``) and ``flwr run .`` (simulation or deployment) both call
``run_federation`` from their ServerApp main; nothing forks by mode.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord
from flwr.serverapp import Grid

from attacks import AttackerKnowledge, AttackPool, needs_full_updates
from leakbed.adoption import defending_users
from leakbed.config import ExperimentConfig
from leakbed.data import Federation, federation
from leakbed.models import attack_keys, build_model
from leakbed.store import UpdateStore
from leakbed.training import evaluate, pick_device
from server.dp import dp_fedavg_defense, privacy_summary, wrap_dp
from server.metrics import RunTelemetry, observe_round
from server.metrics import serve as serve_metrics
from server.referee import Referee
from server.score_participant import score_participants
from server.scorers import score_suite
from server.shuffler import Shuffler
from server.strategy import CuriousFedAvg

log = logging.getLogger(__name__)
Progress = Callable[[int, dict[str, float]], None]


def _knowledge(cfg: ExperimentConfig, fed: Federation, keys: list[str]) -> AttackerKnowledge:
    """What the curious server knows: prior data by identity, the corpus' shape, no private data."""
    return AttackerKnowledge(
        prior=fed.prior(),
        corpus_meta=replace(fed.corpus, users={}),
        model=cfg.model,
        attack=cfg.attack,
        keys=keys,
        seed=cfg.seed,
        device=cfg.device,
    )


def _train_config(cfg: ExperimentConfig, rule: str) -> ConfigRecord:
    return ConfigRecord(
        {
            "epochs": cfg.fl.local_epochs,
            "batch_size": cfg.fl.batch_size,
            "lr": cfg.fl.lr,
            "optimizer": cfg.fl.optimizer,
            "momentum": cfg.fl.momentum,
            "steps": cfg.fl.local_steps,
            "experiment": cfg.model_dump_json(),
            "prior-rule": rule,
        }
    )


def run_federation(grid: Grid, cfg: ExperimentConfig, rule: str, out: Path, progress: Progress | None = None) -> dict:
    """Train with the curious strategy, fit the attacks, score them; writes ``out/metrics.json``."""
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    fed = federation(cfg, rule)
    model = build_model(cfg.model, fed.corpus)
    keys = attack_keys(model, cfg.model.attack_layers)
    store = UpdateStore(out / "store")
    referee = Referee(out / "referee")
    test = fed.test_set()
    device = pick_device(cfg.device)
    utility: dict[int, dict[str, float]] = {}
    serve_metrics(cfg.telemetry)
    tel = RunTelemetry(cfg, rule)

    def evaluate_fn(rnd: int, arrays: ArrayRecord) -> MetricRecord:
        model.load_state_dict(arrays.to_torch_state_dict())
        utility[rnd] = evaluate(model, test, fed.corpus.task, device=device)
        if progress:
            progress(rnd, utility[rnd])
        tel.utility(utility[rnd]["utility"])
        observe_round(tel, rnd, strategy.rounds.get(rnd), pool.stats, pool.depth())
        if cfg.attack.score_every and rnd and rnd % cfg.attack.score_every == 0 and rnd < cfg.fl.rounds:
            pool.score(cfg.attack.attackers)  # interim scores for the privacy-over-rounds gauges
        return MetricRecord(utility[rnd])

    def interim_score(name: str, partial: bool) -> None:
        if partial and name in cfg.attack.attackers:
            tel.attack(name, referee.score(store, name))

    pool = AttackPool(
        _knowledge(cfg, fed, keys),
        str(store.root),
        workers=cfg.attack.workers,
        queue_size=cfg.attack.queue_size,
        submit_timeout=cfg.attack.submit_timeout,
        addresses=cfg.attack.worker_addresses,
        retry_seconds=cfg.attack.retry_seconds,
        run_id=f"{cfg.name}-{rule}",
        metrics_port_base=cfg.telemetry.worker_port,
        on_fit=interim_score,
    )
    try:
        shuffler = Shuffler(
            referee,
            keys,
            cfg.seed,
            full_updates=needs_full_updates(cfg.attack.suite),
            batch_min=cfg.shuffler.batch_min,
            reference=cfg.shuffler.reference,
        )
        strategy = CuriousFedAvg(
            shuffler=shuffler,
            pool=pool,
            seed=cfg.seed,
            max_reply_bytes=int(cfg.fl.max_reply_mb * 2**20),
            uniform_weights=dp_fedavg_defense(cfg) is not None,
            fraction_train=cfg.fl.fraction_train,
            fraction_evaluate=0.0,
            min_train_nodes=1,
            min_evaluate_nodes=0,
            min_available_nodes=len(fed.user_ids),
        )
        runner = wrap_dp(strategy, cfg, len(fed.user_ids))  # dp-fedavg: Flower's DP wrapper adds the noise
        t0 = time.perf_counter()
        runner.start(
            grid=grid,
            initial_arrays=ArrayRecord(model.state_dict()),
            num_rounds=cfg.fl.rounds,
            timeout=cfg.fl.round_timeout,
            train_config=_train_config(cfg, rule),
            evaluate_fn=evaluate_fn,
        )
        fl_seconds = time.perf_counter() - t0
        t1 = time.perf_counter()
        pool.fit([*cfg.attack.attackers, *cfg.attack.suite])
        attack_seconds = time.perf_counter() - t1
    finally:
        pool.close()
    fit = pool.stats.fit_seconds
    scored = [n for n in cfg.attack.attackers if n in fit and fit[n] == fit[n]]  # NaN: the fit failed
    defending = defending_users(cfg, fed.user_ids)
    groups = {"defending": defending, "not defending": set(fed.user_ids) - defending} if cfg.defenses else None
    metrics = {name: referee.score(store, name, groups) for name in scored}
    failed = {name: "fit failed or timed out (see pool errors)" for name in cfg.attack.attackers if name not in scored}
    suite_ok = [n for n in cfg.attack.suite if n in fit and fit[n] == fit[n]]
    suite = score_suite(referee, store, cfg, out, suite_ok)
    failed |= {name: "fit failed or timed out (see pool errors)" for name in cfg.attack.suite if name not in suite_ok}
    summary = {
        "prior": rule,
        "users": len(fed.user_ids),
        "rounds": cfg.fl.rounds,
        "attackers": metrics,
        "attackers_failed": failed,
        "suite": suite,
        # attacks by adversarial participants (devices), reported apart from the server's
        "participant_attacks": {"active-property": score_participants(referee.folder, cfg)} if cfg.adversary.users else {},
        "utility": {str(r): u for r, u in sorted(utility.items())},
        "rounds_log": {str(r): vars(s) for r, s in sorted(strategy.rounds.items())},
        "pool": pool.stats.to_dict(),
        "fl_seconds": fl_seconds,
        "attack_fit_seconds": attack_seconds,
        "attack_layers": keys,
        "defenses": [d.model_dump() for d in cfg.defenses],
        "defending_users": len(defending),
        "privacy": privacy_summary(cfg, fed.user_ids, getattr(runner, "releases", 0)),
        "shuffler": shuffler.batching.stats.to_dict(),
    }
    (out / "metrics.json").write_text(json.dumps(summary, indent=2, default=float))
    for name, result in {**metrics, **suite}.items():
        tel.attack(name, result)
    tel.pool(pool.stats, 0)
    tel.finished(out)
    return summary
