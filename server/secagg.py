"""An FL run under Flower's SecAgg+ (legacy workflow): the curious server sees only each round's
aggregate (issue 4; seed 002 §7.2.6-7.2.7 for what still leaks from aggregates).

``SecAggPlusWorkflow`` inside the legacy ``DefaultWorkflow`` masks every device's weighted
parameters; the legacy FedAvg below receives only the unmasked weighted mean (plus each device's
plaintext num_examples and metrics, whose truth keys it seals for the referee and strips). It taps
the round's aggregate Δ = w_global − w_mean as one anonymous update. Attacks that need individual
updates (re-identification and the per-update suite attacks) are reported as unable to run;
aggregate-level attacks are fitted and scored as usual.
"""

from __future__ import annotations

import json
import random

import numpy as np
import torch
from flwr.app import Context
from flwr.common import FitIns, FitRes, Parameters, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server import LegacyContext, ServerConfig
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import FedAvg
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow
from flwr.serverapp import Grid, ServerApp

from attacks import AnonymousUpdate, AttackPool, RoundSnapshot, needs_full_updates
from core.config import ExperimentConfig
from core.derive import derived_seed
from core.layout import RunLayout
from core.updates import delta_vector
from referee.seal import Sealer
from server.cancel import RunControl, controlled_main
from server.judge import Judge
from server.run_parts import FIT_FAILED, Progress, prepare_run, train_config
from server.startup import bounded_start
from server.strategy import StartupTimeout

AGGREGATE_LEVEL = ("aggregate-property",)  # suite attacks that read only per-round aggregates
CANNOT_RUN = "cannot run: secure aggregation hides individual updates"
TRUTH_PREFIX = "leakbed-truth-"


class CuriousSecAggFedAvg(FedAvg):
    """Legacy FedAvg that sees only the SecAgg+ aggregate and taps it for aggregate-level attacks."""

    def __init__(
        self,
        *,
        keys: list[str],
        names: list[str],
        sealer: Sealer,
        pool: AttackPool,
        train_config: dict,
        full: bool,
        startup_timeout: float = 300.0,
        **kw: object,
    ) -> None:
        super().__init__(**kw)
        self._startup_timeout = startup_timeout
        self._keys, self._names, self._sealer, self._pool = keys, names, sealer, pool
        self._train_config = train_config
        self._full = full
        self._global: dict[str, np.ndarray] = {}
        self._dtypes: list[np.dtype] = []
        self.rounds: dict[int, dict] = {}

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        arrays = parameters_to_ndarrays(parameters)
        self._dtypes = self._dtypes or [a.dtype for a in arrays]  # round 1 gets the model's own arrays
        self._global = dict(zip(self._names, arrays, strict=True))
        need = self.min_available_clients  # the legacy sampler would wait a day for them: round 1 waits fl.startup_timeout
        if server_round == 1 and not client_manager.wait_for(need, timeout=self._startup_timeout):  # type: ignore[arg-type]
            raise StartupTimeout(
                f"only {client_manager.num_available()} of {need} devices connected within "
                f"fl.startup_timeout = {self._startup_timeout:g} s"
            )
        pairs = super().configure_fit(server_round, parameters, client_manager)
        pairs = sorted(pairs, key=lambda p: p[0].node_id)
        for _, ins in pairs:
            ins.config.update({**self._train_config, "server-round": server_round})
        train = {k: self._train_config[k] for k in ("epochs", "batch_size", "lr", "optimizer", "momentum", "steps")}
        self._pool.submit_round(RoundSnapshot(server_round, self._global, {**train, "participants": len(pairs)}))
        self.rounds[server_round] = {"sampled": len(pairs), "received": 0, "failed": 0, "rejected": 0, "reasons": []}
        return pairs

    def aggregate_fit(
        self, server_round: int, results: list[tuple[ClientProxy, FitRes]], failures: list
    ) -> tuple[Parameters | None, dict]:
        """Seal and strip the devices' truth metrics, tap the aggregate, then aggregate as FedAvg does."""
        facts = []
        for _, res in results:
            facts.append({k[len(TRUTH_PREFIX) :]: res.metrics.pop(k) for k in list(res.metrics) if k.startswith(TRUTH_PREFIX)})
        self.rounds.setdefault(server_round, {}).update(received=len(results), failed=len(failures))
        if results:
            mean = dict(zip(self._names, parameters_to_ndarrays(results[0][1].parameters), strict=True))
            update_id = self._sealer.new_update_id()
            has = [int(f.get("has-property", 0)) for f in facts]
            self._sealer.seal(
                update_id,
                "aggregate:" + " ".join(sorted(str(f.get("user-id", "?")) for f in facts)),
                server_round,
                {"has-property": int(any(has)), "participants": len(results), "holders": int(sum(has))},
            )
            full = {k: (self._global[k] - mean[k]).astype(np.float32) for k in self._names} if self._full else None
            n = sum(int(res.num_examples) for _, res in results)
            self._pool.submit_updates(
                [AnonymousUpdate(update_id, server_round, delta_vector(self._global, mean, self._keys), n, full)]
            )
        aggregate, metrics = super().aggregate_fit(server_round, results, failures)
        return self._in_model_dtypes(aggregate), metrics

    def _in_model_dtypes(self, parameters: Parameters | None) -> Parameters | None:
        """SecAgg+ dequantizes to float64; the next global model keeps the model's dtypes, so that the
        devices and the attack side (which loads it into the model) get what plain FedAvg gives them."""
        if parameters is None:  # no replies this round
            return parameters
        arrays = parameters_to_ndarrays(parameters)
        return ndarrays_to_parameters([a.astype(d, copy=False) for a, d in zip(arrays, self._dtypes, strict=True)])


def run_secagg_federation(
    grid: Grid,
    context: Context,
    cfg: ExperimentConfig,
    rule: str,
    layout: RunLayout,
    judge: Judge,
    progress: Progress | None = None,
) -> dict:
    """The legacy SecAgg+ counterpart of ``server.experiment.run_federation``; writes the prior's ``metrics.json``."""
    random.seed(derived_seed(cfg.seed, "sampling"))  # the legacy client manager samples with the global ``random``
    run = prepare_run(cfg, rule, layout, progress)
    names = list(run.model.state_dict())

    def evaluate_fn(rnd: int, ndarrays: list[np.ndarray], config: dict) -> tuple[float, dict]:
        utility = run.evaluate(rnd, {k: torch.from_numpy(np.asarray(v)) for k, v in zip(names, ndarrays, strict=True)})
        return utility["loss"], utility

    runnable = [n for n in cfg.attack.suite if n in AGGREGATE_LEVEL]
    pool = run.pool()
    try:
        strategy = CuriousSecAggFedAvg(
            keys=run.keys,
            names=names,
            sealer=run.sealer,
            pool=pool,
            train_config=dict(train_config(cfg, rule).items()),
            full=needs_full_updates(runnable),
            startup_timeout=cfg.fl.startup_timeout,
            fraction_fit=cfg.fl.fraction_train,
            fraction_evaluate=0.0,
            min_fit_clients=1,
            min_evaluate_clients=0,
            min_available_clients=len(run.fed.user_ids),
            evaluate_fn=evaluate_fn,
            initial_parameters=ndarrays_to_parameters([v.detach().cpu().numpy() for v in run.model.state_dict().values()]),
        )
        sa = cfg.fl.secagg
        legacy = LegacyContext(
            context=context, config=ServerConfig(num_rounds=cfg.fl.rounds, round_timeout=cfg.fl.round_timeout), strategy=strategy
        )
        workflow = DefaultWorkflow(
            fit_workflow=SecAggPlusWorkflow(
                num_shares=sa.num_shares,
                reconstruction_threshold=sa.reconstruction_threshold,
                max_weight=sa.max_weight,
                clipping_range=sa.clipping_range,
                quantization_range=sa.quantization_range,
                timeout=cfg.fl.round_timeout,
            )
        )
        run.timed("fl", lambda: workflow(bounded_start(grid, cfg.fl.startup_timeout), legacy))
        run.timed("attack_fit", lambda: pool.fit(runnable))
    finally:
        pool.close()
    ok = run.fitted(pool, runnable)
    failed = {n: CANNOT_RUN for n in cfg.attack.attackers}
    failed |= {n: CANNOT_RUN for n in cfg.attack.suite if n not in AGGREGATE_LEVEL}
    failed |= {n: FIT_FAILED for n in runnable if n not in ok}
    summary = {
        **run.summary(pool),
        "secure_aggregation": "secagg+",
        "attackers": {},
        "attackers_failed": failed,
        "suite": judge.suite(ok),
        "rounds_log": {str(r): s for r, s in sorted(strategy.rounds.items())},
    }
    (run.out / "metrics.json").write_text(json.dumps(summary, indent=2, default=float))
    return summary


def build_secagg_server_app(
    cfg: ExperimentConfig,
    rule: str,
    layout: RunLayout,
    judge: Judge,
    progress: Progress | None = None,
    control: RunControl | None = None,
) -> ServerApp:
    """A ServerApp whose main runs ``cfg`` under SecAgg+ (used by ``leakbed run``)."""
    bound = ServerApp()

    @bound.main()
    def _main(grid: Grid, context: Context) -> None:
        controlled_main(lambda g: run_secagg_federation(g, context, cfg, rule, layout, judge, progress), grid, control)

    return bound
