"""leakbed's overhead over plain Flower on the same workload.

``python -m benchmarks.overhead [--users 30] [--rounds 5] [--fraction 0.2] [--repeats 1]``

Both runs use one config (synthetic users, rounds, model, train config, seed), the same
ClientApp (``client.app:app``), the same initial model, ``run_simulation`` with the same
backend config, inside ``seeded_node_ids``:

* plain: a ServerApp whose main runs ``flwr.serverapp.strategy.FedAvg`` (fraction_train C,
  fraction_evaluate 0, min_train_nodes 1, min_available_nodes = users) with the train
  ConfigRecord of ``server.experiment._train_config``; its evaluate_fn is a no-op that only
  records the end of each round (``--plain-evaluate``: the same centralised evaluation leakbed does);
* leakbed: ``leakbed.simulate.simulate(cfg, rule, out)``: the curious strategy, shuffler, attack
  pool, referee, per-round utility evaluation, and fitting the attackers after the last round.

FL time is ``strategy.start`` (plain, timed here) and metrics.json ``fl_seconds`` (leakbed);
whole-run time is the ``run_simulation`` / ``simulate`` call (Ray start and stop included, and
for leakbed its set-up and the attack fitting). FedAvg samples clients with Python's global
``random`` (seeded here), leakbed with its own per-round RNG: the cohorts differ, their sizes do
not; the table shows the examples trained by each run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.common import (
    QUIET_ENV, RoundMarks, add_common_args, finish, fmt, fresh, median, out_dir, pool_timeline, print_config, table,
)
from benchmarks.measure import TreeMemory

if TYPE_CHECKING:
    from flwr.app import Message

    from leakbed.config import ExperimentConfig

for _key, _value in QUIET_ENV.items():  # before anything imports flwr (all Flower imports below are lazy)
    os.environ.setdefault(_key, _value)
os.environ.setdefault("FLWR_LOG_LEVEL", "WARNING")
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")


class CountingGrid:
    """Passes everything to the real Grid; counts the messages sent, replies, errors and examples per round."""

    def __init__(self, grid: Any) -> None:
        self._grid = grid
        self.rounds: list[dict[str, int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grid, name)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        msgs = list(messages)
        replies = list(self._grid.send_and_receive(msgs, timeout=timeout))
        ok = [m for m in replies if not m.has_error()]
        if msgs:  # FedAvg also calls this (with no messages) for its skipped evaluation
            self.rounds.append({
                "sent": len(msgs), "replies": len(replies), "errors": len(replies) - len(ok),
                "examples": sum(int(m.content.metric_records["metrics"]["num-examples"]) for m in ok),
            })
        return replies


def run_plain(cfg: ExperimentConfig, rule: str, evaluate_server: bool, interval: float) -> dict:
    import random

    import torch
    from flwr.app import ArrayRecord, Context, MetricRecord
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation

    from client.app import app as client_app
    from leakbed.data import federation
    from leakbed.models import build_model
    from leakbed.simulate import backend_config, seeded_node_ids
    from leakbed.training import evaluate, pick_device
    from server.experiment import _train_config

    fed = federation(cfg, rule)
    users = len(fed.user_ids)
    marks = RoundMarks()
    state: dict = {}
    app = ServerApp()

    @app.main()
    def _main(grid: Grid, context: Context) -> None:
        random.seed(cfg.seed)  # FedAvg samples with the global random
        torch.manual_seed(cfg.seed)  # as run_federation does before build_model: same initial weights
        model = build_model(cfg.model, fed.corpus)
        initial = ArrayRecord(model.state_dict())
        state["initial"] = {k: v.numpy().copy() for k, v in initial.items()}
        test, device = fed.test_set(), pick_device(cfg.device)

        def evaluate_fn(rnd: int, arrays: ArrayRecord) -> MetricRecord | None:
            res = None
            if evaluate_server:
                model.load_state_dict(arrays.to_torch_state_dict())
                res = MetricRecord(evaluate(model, test, fed.corpus.task, device=device))
            marks(rnd)
            return res

        strategy = FedAvg(
            fraction_train=cfg.fl.fraction_train, fraction_evaluate=0.0, min_train_nodes=1,
            min_evaluate_nodes=0, min_available_nodes=users,
        )
        counting = CountingGrid(grid)
        state["grid"] = counting
        t0 = time.perf_counter()
        state["result"] = strategy.start(
            grid=counting, initial_arrays=initial, num_rounds=cfg.fl.rounds, timeout=cfg.fl.round_timeout,
            train_config=_train_config(cfg, rule), evaluate_fn=evaluate_fn,
        )
        state["fl_seconds"] = time.perf_counter() - t0

    with TreeMemory(interval=interval) as mem:
        t0 = time.perf_counter()
        with seeded_node_ids(cfg.seed):
            run_simulation(server_app=app, client_app=client_app, num_supernodes=users, backend_config=backend_config(cfg))
        whole = time.perf_counter() - t0

    problems = []
    result = state.get("result")
    per_round = state["grid"].rounds if "grid" in state else []
    if result is None:
        problems.append("strategy.start returned no Result")
    else:
        got = sorted(result.train_metrics_clientapp)
        if got != list(range(1, cfg.fl.rounds + 1)):
            problems.append(f"train metrics for rounds {got}, expected 1..{cfg.fl.rounds}")
        if not len(result.arrays):
            problems.append("no aggregated arrays")
    if len(per_round) != cfg.fl.rounds:
        problems.append(f"{len(per_round)} training rounds sent, expected {cfg.fl.rounds}")
    for i, r in enumerate(per_round, 1):
        if r["replies"] != r["sent"] or r["errors"]:
            problems.append(f"round {i}: {r['sent']} sent, {r['replies']} replies, {r['errors']} errors")
    return {
        "fl_s": state.get("fl_seconds"), "whole_s": whole, "other_s": whole - state.get("fl_seconds", 0.0), "fit_s": None,
        **marks.split(cfg.fl.rounds),
        "updates": sum(r["replies"] - r["errors"] for r in per_round), "examples": sum(r["examples"] for r in per_round),
        "clients_per_round": [r["sent"] for r in per_round],
        "memory": mem.report(), "problems": problems, "initial": state.get("initial"),
    }


def run_leakbed(cfg: ExperimentConfig, rule: str, out: Path, interval: float) -> dict:
    from leakbed.data import federation
    from leakbed.simulate import simulate
    from leakbed.store import UpdateStore

    marks = RoundMarks()
    with TreeMemory(interval=interval) as mem:
        t0 = time.perf_counter()
        summary = simulate(cfg, rule, out, marks)
        whole = time.perf_counter() - t0

    fed = federation(cfg, rule)
    truth = [json.loads(line) for line in (out / "referee" / "truth.jsonl").read_text().splitlines() if line]
    examples = sum(len(fed.splits[t["user_id"]].private) for t in truth)
    logs = summary["rounds_log"]
    problems = [f"round {r}: {s}" for r, s in logs.items() if s["received"] != s["sampled"] or s["failed"] or s["rejected"]]
    if sorted(int(r) for r in logs) != list(range(1, cfg.fl.rounds + 1)):
        problems.append(f"rounds logged {sorted(logs)}")
    pool = summary["pool"]
    try:
        initial = UpdateStore(out / "store").read_global(1)  # round 1's global model = the initial model
    except OSError:
        initial = None
    fl, fit = summary["fl_seconds"], summary["attack_fit_seconds"]
    return {
        "fl_s": fl, "whole_s": whole, "fit_s": fit, "other_s": whole - fl - fit, **marks.split(cfg.fl.rounds),
        "updates": len(truth), "examples": examples, "clients_per_round": [logs[str(r)]["sampled"] for r in sorted(int(k) for k in logs)],
        "memory": mem.report(), "problems": problems, "initial": initial,
        "pool": {k: pool[k] for k in ("tapped", "analysed", "dropped", "failed", "rounds_submitted", "rounds_analysed", "max_lag_rounds", "shadow_seconds")}
        | {"fit_seconds": pool["fit_seconds"], "errors": pool["errors"][:3]}
        | pool_timeline(out / "store", marks, cfg.fl.rounds),
        "attackers": {n: {k: m[k] for k in ("ap", "chance_ap", "x_chance", "top1")} for n, m in summary["attackers"].items()},
    }


def _same_initial(a: dict | None, b: dict | None) -> bool | None:
    import numpy as np

    if a is None or b is None:
        return None
    return set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.overhead", description=__doc__.split("\n\n")[0])
    p.add_argument("--users", type=int, default=30, help="synthetic users = virtual SuperNodes (default 30)")
    p.add_argument("--rounds", type=int, default=5, help="FL rounds (default 5)")
    p.add_argument("--fraction", type=float, default=0.2, help="fraction of clients per round C (default 0.2)")
    p.add_argument("--repeats", type=int, default=1, help="pairs of runs; the order alternates, medians are reported (default 1)")
    p.add_argument("--plain-evaluate", action="store_true", help="give plain FedAvg leakbed's centralised evaluation each round")
    add_common_args(p)
    args = p.parse_args(argv)

    from leakbed.config import dump_config, load_config
    from leakbed.data import federation
    from leakbed.models import build_model

    cfg = load_config(args.config, [
        f"data.synthetic.users={args.users}", f"fl.rounds={args.rounds}", f"fl.fraction_train={args.fraction}",
        f"seed={args.seed}", *args.set,
    ])
    t0 = time.perf_counter()
    fed = federation(cfg, args.rule)  # warm this process' cache for both runs; not timed
    build_model(cfg.model, fed.corpus)
    warm = time.perf_counter() - t0
    users = len(fed.user_ids)
    settings = {
        "users (virtual SuperNodes)": f"{users} (of {cfg.data.synthetic.users} generated; min_examples {cfg.data.min_examples})",
        "rounds": cfg.fl.rounds, "fraction_train C": cfg.fl.fraction_train,
        "clients per round": max(int(users * cfg.fl.fraction_train), 1),
        "prior rule": args.rule, "seed": cfg.seed, "repeats": args.repeats,
        "plain server-side evaluation": args.plain_evaluate,
        "attack workers / attackers": f"{cfg.attack.workers} / {', '.join(cfg.attack.attackers)}",
        "client resources": f"{cfg.simulation.client_cpus} CPU, {cfg.simulation.client_gpus} GPU per actor; host CPUs {os.cpu_count()}",
        "driver warm-up (federation + model, not timed)": f"{warm:.2f} s",
    }
    print_config("benchmarks.overhead: plain Flower FedAvg vs leakbed, same workload", settings, dump_config(cfg))

    runs: dict[str, list[dict]] = {"plain": [], "leakbed": []}
    with out_dir(args.out, "leakbed-overhead-") as out:
        for i in range(args.repeats):
            order = ("plain", "leakbed") if i % 2 == 0 else ("leakbed", "plain")
            for kind in order:
                print(f"-- repeat {i + 1}/{args.repeats}: {kind} ...", flush=True)
                if kind == "plain":
                    res = run_plain(cfg, args.rule, args.plain_evaluate, args.interval)
                else:
                    res = run_leakbed(cfg, args.rule, fresh(out / f"leakbed-{i + 1}" / args.rule), args.interval)
                runs[kind].append(res)
                print(f"   {kind}: FL {res['fl_s']:.2f} s, whole {res['whole_s']:.2f} s, peak tree RSS {res['memory']['peak_tree_rss_mib']} MiB"
                      + (f", PROBLEMS: {res['problems']}" if res["problems"] else ""), flush=True)

        same_init = [_same_initial(p["initial"], leak["initial"]) for p, leak in zip(runs["plain"], runs["leakbed"], strict=True)]
        med = {kind: {k: median([r[k] for r in rs]) for k in ("fl_s", "whole_s", "fit_s", "other_s", "round1_s", "steady_round_s")}
               | {"peak_rss_mib": median([r["memory"]["peak_tree_rss_mib"] for r in rs]),
                  "peak_pss_mib": median([r["memory"]["peak_tree_pss_mib"] for r in rs])}
               for kind, rs in runs.items()}

        def ratio(key: str) -> float | None:
            a, b = med["leakbed"][key], med["plain"][key]
            return a / b if a is not None and b else None

        rows = [
            ["FL rounds (strategy.start) [s]", med["plain"]["fl_s"], med["leakbed"]["fl_s"], ratio("fl_s")],
            ["  round 1 (incl. Ray actor start) [s]", med["plain"]["round1_s"], med["leakbed"]["round1_s"], ratio("round1_s")],
            ["  mean of rounds 2..R [s]", med["plain"]["steady_round_s"], med["leakbed"]["steady_round_s"], ratio("steady_round_s")],
            ["attack fitting (drain + fit) [s]", None, med["leakbed"]["fit_s"], None],
            ["other: set-up, Ray start/stop [s]", med["plain"]["other_s"], med["leakbed"]["other_s"], ratio("other_s")],
            ["whole run [s]", med["plain"]["whole_s"], med["leakbed"]["whole_s"], ratio("whole_s")],
            ["peak tree RSS [MiB]", med["plain"]["peak_rss_mib"], med["leakbed"]["peak_rss_mib"], ratio("peak_rss_mib")],
            ["peak tree PSS [MiB]", med["plain"]["peak_pss_mib"], med["leakbed"]["peak_pss_mib"], ratio("peak_pss_mib")],
            ["updates trained", runs["plain"][0]["updates"], runs["leakbed"][0]["updates"], None],
            ["examples trained", runs["plain"][0]["examples"], runs["leakbed"][0]["examples"], None],
        ]
        n = f" (median of {args.repeats})" if args.repeats > 1 else ""
        print(f"\n== results{n}")
        print(table(["", "plain FedAvg", "leakbed", "leakbed/plain"], rows))
        for i, (pl, lk) in enumerate(zip(runs["plain"], runs["leakbed"], strict=True), 1):
            pool = lk["pool"]
            print(f"repeat {i}: plain FL {pl['fl_s']:.2f} s / whole {pl['whole_s']:.2f} s; leakbed FL {lk['fl_s']:.2f} s / "
                  f"whole {lk['whole_s']:.2f} s; pool tapped {pool['tapped']} analysed {pool['analysed']} dropped {pool['dropped']} "
                  f"failed {pool['failed']}; max lag {pool['max_lag_rounds']} round(s) (pool stat), "
                  f"{pool['max_lag_rounds_from_files']} (from store file times); pool busy "
                  f"{fmt(pool['pool_busy_after_fl_s'])} s after the last round; same initial model: {same_init[i - 1]}")
        for name, m in runs["leakbed"][-1]["attackers"].items():
            print(f"attacker {name}: AP {m['ap']:.3f} = {m['x_chance']:.2f} x chance ({m['chance_ap']:.3f}), top-1 {m['top1']:.3f}")
        problems = {kind: [r["problems"] for r in rs if r["problems"]] for kind, rs in runs.items()}
        ok = not any(problems.values()) and all(s is not False for s in same_init)
        if not ok:
            print(f"PROBLEMS: {problems}; same initial model: {same_init}", file=sys.stderr)
        last = runs["leakbed"][-1]["pool"]
        summary = {
            "benchmark": "overhead", "ok": ok, "users": users, "rounds": cfg.fl.rounds, "fraction": cfg.fl.fraction_train,
            "repeats": args.repeats, "seed": cfg.seed, "rule": args.rule, "plain_evaluate": args.plain_evaluate, "cpus": os.cpu_count(),
            "plain": med["plain"], "leakbed": med["leakbed"],
            "ratio": {k: ratio(k) for k in ("fl_s", "steady_round_s", "whole_s", "peak_rss_mib")},
            "pool": {k: last[k] for k in ("tapped", "analysed", "dropped", "failed", "max_lag_rounds", "max_lag_rounds_from_files", "pool_busy_after_fl_s")},
            "updates": {"plain": runs["plain"][0]["updates"], "leakbed": runs["leakbed"][0]["updates"]},
            "examples": {"plain": runs["plain"][0]["examples"], "leakbed": runs["leakbed"][0]["examples"]},
            "same_initial_model": same_init,
        }
        finish(out, bool(args.out), summary)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
