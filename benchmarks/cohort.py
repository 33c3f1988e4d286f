"""A larger Ray cohort with the attack pool on: wall time, peak memory, attack-pool lag.

``python -m benchmarks.cohort [--users 200] [--fraction 0.1] [--rounds 5] [--examples-per-user 60]``

One leakbed run (``leakbed.simulate.simulate``: curious strategy, shuffler, attack pool, referee,
attack fitting) of ``--users`` synthetic clients, one virtual SuperNode each. The config is the
built-in default except users, C, rounds, seed and ``data.synthetic.examples_per_user`` (60
instead of 120, to keep the cohort light; the output says so). Memory is the peak of the summed
RSS of this process and all its descendants (Ray's GCS, raylet, actors, the attack workers),
sampled every 0.2 s; see ``benchmarks/measure.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from benchmarks.common import (
    AFTER_PHASE,
    ROUNDS_PHASE,
    RoundMarks,
    add_common_args,
    finish,
    fmt,
    fresh,
    out_dir,
    pool_timeline,
    print_config,
    quiet_env,
    run_starts,
    table,
)
from benchmarks.measure import TreeMemory

quiet_env()  # before anything imports flwr (all Flower imports below are lazy)


ATTACK_KEYS = ("ap", "chance_ap", "x_chance", "prevalence", "top1", "top5", "n_updates", "n_users")
POOL_KEYS = ("tapped", "analysed", "dropped", "failed", "max_lag_rounds", "shadow_seconds")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cohort", description=__doc__.split("\n\n")[0])
    p.add_argument("--users", type=int, default=200, help="synthetic users = virtual SuperNodes (default 200)")
    p.add_argument("--fraction", type=float, default=0.1, help="fraction of clients per round C (default 0.1)")
    p.add_argument("--rounds", type=int, default=5, help="FL rounds (default 5)")
    p.add_argument(
        "--examples-per-user",
        type=int,
        default=60,
        help="data.synthetic.examples_per_user (default 60; the config's default is 120)",
    )
    add_common_args(p)
    args = p.parse_args(argv)

    from leakbed.core.config import dump_config, load_config
    from leakbed.core.data import federation
    from leakbed.core.layout import RunLayout
    from leakbed.simulate import simulate, simulation_link

    overrides = [
        f"data.synthetic.users={args.users}",
        f"fl.fraction_train={args.fraction}",
        f"fl.rounds={args.rounds}",
        f"data.synthetic.examples_per_user={args.examples_per_user}",
        f"seed={args.seed}",
        *args.set,
    ]
    cfg = load_config(args.config, overrides)
    t0 = time.perf_counter()
    fed = federation(cfg, args.rule)  # build the federation once in this process before timing (simulate would too)
    warm = time.perf_counter() - t0
    users = len(fed.user_ids)
    prior = sum(len(s.prior) for s in fed.splits.values())
    private = sum(len(s.private) for s in fed.splits.values())
    settings = {
        "users (virtual SuperNodes)": f"{users} (of {cfg.data.synthetic.users} generated; min_examples {cfg.data.min_examples})",
        "rounds": cfg.fl.rounds,
        "fraction_train C": cfg.fl.fraction_train,
        "clients per round": max(int(users * cfg.fl.fraction_train), 1),
        "examples per user (mean)": f"{cfg.data.synthetic.examples_per_user} (lighter than the config default 120)",
        "examples: private / prior (all users)": f"{private} / {prior}",
        "prior rule": args.rule,
        "seed": cfg.seed,
        "attack workers / suite": f"{cfg.workers.count} / {', '.join(cfg.attack.suite)}",
        "shadow updates per round (one per known user)": users,
        "client resources": f"{cfg.simulation.client_cpus} CPU, {cfg.simulation.client_gpus} GPU per actor",
        "host CPUs": os.cpu_count(),
        "overrides": " ".join(overrides),
        "driver warm-up (federation, not timed)": f"{warm:.2f} s",
    }
    print_config("benchmarks.cohort: one leakbed run of a larger Ray cohort, attack pool on", settings, dump_config(cfg))

    with out_dir(args.out, "leakbed-cohort-") as out:
        run = fresh(out / "run")  # the run folder (core.layout): metrics in run/<rule>, store in run/attack-store/<rule>
        layout = RunLayout(run)
        marks = RoundMarks()
        rounds = cfg.fl.rounds

        def phase() -> str:
            return AFTER_PHASE if rounds in marks.wall else ROUNDS_PHASE

        mem_ = TreeMemory(interval=args.interval, pss_interval=args.pss_interval, phase=phase)
        with simulation_link(cfg, out / "link-logs") as link, mem_ as mem:  # one Ray head, as leakbed run starts
            start = time.time()
            summary = simulate(cfg, args.rule, run, marks, link)
            end = time.time()
        starts = [run_starts(run, args.rule)]
        memory = mem.report()
        fl, fit = summary["fl_seconds"], summary["attack_fit_seconds"]
        split = marks.split(rounds)
        per_round = {r: marks.perf[r] - marks.perf[r - 1] for r in range(1, rounds + 1) if {r, r - 1} <= marks.perf.keys()}
        main_end = (layout.results(args.rule) / "metrics.json").stat().st_mtime
        pool = summary["pool"]
        timeline = pool_timeline(layout.store(args.rule), marks, rounds)
        logs = summary["rounds_log"]
        problems = [f"round {r}: {s}" for r, s in logs.items() if s["received"] != s["sampled"] or s["failed"] or s["rejected"]]
        if len(logs) != rounds:
            problems.append(f"{len(logs)} rounds logged, expected {rounds}")
        if pool["tapped"] != pool["analysed"] or pool["errors"]:
            problems.append(f"pool: tapped {pool['tapped']}, analysed {pool['analysed']}, errors {pool['errors'][:3]}")
        if starts[0] > 1:  # round times are the last start's; the whole-run time and memory include the failed ones
            print(f"note: the run needed {starts[0]} starts (Ray failed to come up under load)", file=sys.stderr)

        rows: list[list[object]] = [
            ["whole run (simulate) [s]", end - start],
            ["  before round 1: set-up (Ray start overlaps) [s]", marks.wall[0] - start if 0 in marks.wall else None],
            ["  FL rounds (metrics.json fl_seconds) [s]", fl],
            ["    per round: fl_seconds / rounds [s]", fl / rounds],
            ["    round 1 (waits for Ray actors) [s]", split["round1_s"]],
            ["    mean of rounds 2..R [s]", split["steady_round_s"]],
            ["  after the last round: fit, close, score [s]", main_end - marks.wall[rounds] if rounds in marks.wall else None],
            ["    attack drain + fit (metrics.json) [s]", fit],
            ["  teardown: actors, Ray shutdown [s]", end - main_end],
            ["peak RSS of the process tree [MiB]", memory["peak_tree_rss_mib"]],
            ["peak PSS of the process tree [MiB]", memory["peak_tree_pss_mib"]],
            *([f"  during {name} [MiB]", value] for name, value in memory["peak_tree_pss_mib_by_phase"].items()),
            ["peak processes in the tree", memory["peak_processes"]],
            [
                "pool: tapped / analysed / dropped / failed",
                f"{pool['tapped']} / {pool['analysed']} / {pool['dropped']} / {pool['failed']}",
            ],
            ["pool: max lag [rounds] (pool stat)", pool["max_lag_rounds"]],
            ["pool: max lag [rounds] (store file times)", timeline["max_lag_rounds_from_files"]],
            ["pool: busy after the last round [s]", timeline["pool_busy_after_fl_s"]],
            ["pool: shadow-update time, all rounds [s]", pool["shadow_seconds"]],
        ]
        print("\n== results")
        print(table(["", "value"], rows))
        print("RSS at the peak by process [MiB]: " + json.dumps(memory["rss_mib_at_peak_by_process"]))
        print(
            f"memory sampler: {memory['samples']} RSS samples ({memory['mean_rss_sample_ms']} ms each), "
            f"{memory['pss_samples']} PSS samples ({memory['mean_pss_sample_ms']} ms each)"
        )
        print("wall time per round [s]: " + " ".join(f"r{r}={t:.2f}" for r, t in per_round.items()))
        print(f"attack fit seconds: {json.dumps(pool['fit_seconds'])}")
        attackers = {}
        for name, m in summary["attackers"].items():
            attackers[name] = {k: m.get(k) for k in ATTACK_KEYS}
            print(
                f"attacker {name}: AP {fmt(m['ap'], 3)} = {fmt(m['x_chance'])} x chance ({fmt(m['chance_ap'], 3)}), "
                f"top-1 {fmt(m['top1'], 3)}, over {m['n_updates']} updates of {m['n_users']} users"
            )
        if problems:
            print(f"PROBLEMS: {problems}", file=sys.stderr)
        result = {
            "benchmark": "cohort",
            "ok": not problems,
            "users": users,
            "rounds": rounds,
            "fraction": cfg.fl.fraction_train,
            "examples_per_user": cfg.data.synthetic.examples_per_user,
            "seed": cfg.seed,
            "rule": args.rule,
            "cpus": os.cpu_count(),
            "starts": starts[0],
            "whole_s": end - start,
            "fl_s": fl,
            "per_round_s": fl / rounds,
            **split,
            "round_s": list(per_round.values()),
            "attack_fit_s": fit,
            "peak_tree_rss_mib": memory["peak_tree_rss_mib"],
            "peak_tree_pss_mib": memory["peak_tree_pss_mib"],
            "peak_tree_pss_mib_by_phase": memory["peak_tree_pss_mib_by_phase"],
            "rss_mib_at_peak_by_process": memory["rss_mib_at_peak_by_process"],
            "pool": {k: pool[k] for k in POOL_KEYS} | timeline,
            "attackers": {n: {k: a[k] for k in ("ap", "chance_ap", "x_chance")} for n, a in attackers.items()},
        }
        finish(out, bool(args.out), result)
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
