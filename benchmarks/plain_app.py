"""Plain Flower on leakbed's workload: the baseline ServerApp of ``benchmarks.overhead``, which ``flwr run`` loads.

It trains the same federation with Flower's own FedAvg (fraction_train C, fraction_evaluate 0, min_train_nodes 1,
min_available_nodes = users), the same initial model (seeded as ``server.run_parts.prepare_run`` seeds it), the
same ClientApp and round config (``client.app:app`` needs the device plan to find its user's data), and, unless
the run config's ``set`` is ``no-evaluate``, the same centralised utility evaluation after every round. No tap,
shuffler, attack pool or referee. It reports each round through the progress file ``leakbed.simulate`` follows and
writes ``plain.json`` (FL time, per-round counts, aggregation and evaluation seconds) and its initial weights
(``initial.npz``, for the same-initial-model check) into ``out-dir``.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from leakbed.apps import write_progress
from leakbed.core.config import load_config
from leakbed.core.data import federation
from leakbed.core.models import build_model
from leakbed.core.training import evaluate, pick_device
from leakbed.server.plan import device_plan
from leakbed.server.run_parts import train_config


class CountingGrid:
    """Passes everything to the real Grid; counts the messages sent, replies, errors and examples per round."""

    def __init__(self, grid: Grid) -> None:
        self._grid = grid
        self.rounds: list[dict[str, int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grid, name)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        msgs = list(messages)
        replies = list(self._grid.send_and_receive(msgs, timeout=timeout))
        ok = [m for m in replies if not m.has_error()]
        if msgs:  # FedAvg also calls this (with no messages) for its skipped evaluation
            examples = sum(int(m.content.metric_records["metrics"]["num-examples"]) for m in ok)
            counts = {"sent": len(msgs), "replies": len(replies), "errors": len(replies) - len(ok), "examples": examples}
            self.rounds.append(counts)
        return replies


class TimedFedAvg(FedAvg):
    """FedAvg whose aggregation is timed (what leakbed's rounds log as part of their aggregation)."""

    aggregation: list[float]

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        t0 = time.perf_counter()
        try:
            return super().aggregate_train(server_round, replies)
        finally:
            self.aggregation.append(time.perf_counter() - t0)


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    rc = context.run_config
    cfg, rule, out = load_config(str(rc["config"])), str(rc["prior"]), Path(str(rc["out-dir"]))
    out.mkdir(parents=True, exist_ok=True)
    fed = federation(cfg, rule)
    random.seed(cfg.seed)  # FedAvg samples with the global random
    torch.manual_seed(cfg.seed)  # as prepare_run seeds before build_model: the same initial weights
    model = build_model(cfg.model, fed.corpus)
    test, device, evaluations = fed.test_set(), pick_device(cfg.device), []
    do_evaluate = str(rc.get("set", "")) != "no-evaluate"

    def evaluate_fn(rnd: int, arrays: ArrayRecord) -> MetricRecord | None:
        res, utility = None, 0.0
        if do_evaluate:  # as RunParts.evaluate: load the global model, evaluate on the users' held-out data
            t0 = time.perf_counter()
            model.load_state_dict(arrays.to_torch_state_dict())
            metrics = evaluate(model, test, fed.corpus.task, device=device)
            evaluations.append(time.perf_counter() - t0)
            res, utility = MetricRecord(metrics), metrics["utility"]
        write_progress(out, rnd, cfg.fl.rounds, utility)
        return res

    strategy = TimedFedAvg(
        fraction_train=cfg.fl.fraction_train,
        fraction_evaluate=0.0,
        min_train_nodes=1,
        min_evaluate_nodes=0,
        min_available_nodes=len(fed.user_ids),
    )
    strategy.aggregation = []
    counting = CountingGrid(grid)
    initial = ArrayRecord(model.state_dict())
    np.savez(out / "initial.npz", **{k: v.detach().cpu().numpy() for k, v in model.state_dict().items()})
    t0 = time.perf_counter()
    result = strategy.start(
        grid=counting,
        initial_arrays=initial,
        num_rounds=cfg.fl.rounds,
        timeout=cfg.fl.round_timeout,
        train_config=train_config(cfg, device_plan(cfg, rule, fed.user_ids)),
        evaluate_fn=evaluate_fn,
    )
    report = {
        "fl_seconds": time.perf_counter() - t0,
        "rounds": counting.rounds,
        "trained_rounds": sorted(result.train_metrics_clientapp),
        "aggregation_seconds": strategy.aggregation,
        "evaluation_seconds": evaluations[1:],  # after each round (the first is the initial model's)
        "main_end": time.time(),
    }
    (out / "plain.json").write_text(json.dumps(report), encoding="utf-8")
