"""leakbed's overhead over plain Flower on the same workload, like with like, and where it goes.

``python -m benchmarks.overhead [--users 30] [--rounds 5] [--fraction 0.2] [--repeats 1] [--no-plain-evaluate]``

Both runs take Flower's current simulation path the same way: ``flwr run`` submits the run to a simulation
SuperLink of its own, with a private Ray head (``leakbed.simulate.SimulationLink``), one virtual SuperNode per
user, the same ClientApp (``client.app:app``), the same config, initial model, round config and seed:

* plain: ``benchmarks.plain_app``, a ServerApp running Flower's ``FedAvg`` (fraction_train C, fraction_evaluate 0,
  min_train_nodes 1, min_available_nodes = users) whose evaluate_fn runs the same centralised utility evaluation
  leakbed runs after every round (like with like; ``--no-plain-evaluate`` gives the comparison against none,
  which puts the evaluation into the gap);
* leakbed: ``leakbed.simulate.simulate(cfg, rule, run_dir)``: the curious tap, shuffler, attack pool, referee,
  per-round utility evaluation, and fitting the attackers after the last round.

It reports the three ratios of issue 14.4 against their goals (steady round <= 1.10x, whole run <= 1.2x, peak
tree PSS <= 1.25x) and explains the steady-round gap: the server-side work each ServerApp logs per round
(leakbed's validation, shuffling with sealing, tap and FedAvg aggregation, plain's aggregation; both evaluations),
and the CPU seconds each kind of process used during the steady rounds (from /proc) show what the attack workers
took from the cores the client actors run on. Memory is split the same way: RSS at the peak by kind of process.

Round marks come from the progress file each ServerApp writes after its evaluation (followed every 0.2 s). FL
time is the ServerApp's own ``strategy.start``; the whole run is the submission to the link until ``flwr run``
returns (the Simulation Runtime's start, Ray's join, the rounds, leakbed's attack fit and scoring). FedAvg samples
clients with Python's global ``random`` (seeded), leakbed by the devices' tickets: the cohorts differ, their sizes
do not; the table shows the examples trained by each run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.common import (
    RoundMarks,
    add_common_args,
    finish,
    fmt,
    fresh,
    median,
    out_dir,
    pool_timeline,
    print_config,
    quiet_env,
    run_starts,
    table,
)
from benchmarks.measure import TreeMemory, cpu_between, tree_cpu_by_label

if TYPE_CHECKING:
    from leakbed.core.config import ExperimentConfig

quiet_env()  # before anything imports flwr (all Flower imports below are lazy)


GOALS = {"steady_round_s": 1.10, "whole_s": 1.2, "memory": 1.25}  # issue 14.4: leakbed / plain at most


class CpuMarks(RoundMarks):
    """Round marks that also snapshot the CPU seconds of every process in this tree at each mark."""

    def __init__(self) -> None:
        super().__init__()
        self.cpu: dict[int, dict[int, tuple[str, float]]] = {}

    def __call__(self, rnd: int, *rest: object) -> None:
        super().__call__(rnd, *rest)
        self.cpu[rnd] = tree_cpu_by_label()

    def steady_cpu(self, rounds: int) -> dict[str, float]:
        """CPU seconds per steady round (rounds 2..R) by kind of process."""
        if rounds < 2 or 1 not in self.cpu or rounds not in self.cpu:
            return {}
        return {k: v / (rounds - 1) for k, v in cpu_between(self.cpu[1], self.cpu[rounds]).items()}


POOL_KEYS = ("tapped", "analysed", "dropped", "failed", "rounds_submitted", "rounds_analysed", "max_lag_rounds", "shadow_seconds")


def run_plain(cfg: ExperimentConfig, rule: str, evaluate_server: bool, out: Path, interval: tuple[float, float]) -> dict:
    """One plain-Flower run (``benchmarks.plain_app``) on a simulation SuperLink of its own."""
    import threading

    import numpy as np

    from leakbed.apps import PROGRESS_FILE
    from leakbed.core.config import dump_config
    from leakbed.core.data import federation
    from leakbed.simulate import SimulationLink, federation_config, follow

    (out / "config.toml").write_text(dump_config(cfg))
    users = len(federation(cfg, rule).user_ids)
    marks = CpuMarks()
    root = Path(__file__).resolve().parents[1]  # the ServerApp imports benchmarks.plain_app from the repository
    app, env = "benchmarks.plain_app:app", {"PYTHONPATH": str(root)}
    with SimulationLink(out / "logs", own_ray=True, server_app=app, extra_env=env) as link:
        done = threading.Event()
        watcher = threading.Thread(target=follow, args=(done.is_set, out / PROGRESS_FILE, marks), daemon=True)
        with TreeMemory(interval=interval[0], pss_interval=interval[1]) as mem:
            watcher.start()
            start = time.time()
            run_config = {"config": str(out / "config.toml"), "prior": rule, "out-dir": str(out)}
            run_config["set"] = "" if evaluate_server else "no-evaluate"
            link.submit(run_config, federation_config(cfg, users), out / "flwr-run.log")
            end = time.time()
            done.set()
            watcher.join(timeout=5)
    problems = []
    try:
        report = json.loads((out / "plain.json").read_text())
    except OSError:
        return {"problems": [f"no plain.json (see {out / 'flwr-run.log'})"], "memory": mem.report(), **dict.fromkeys(TIMES)}
    per_round = report["rounds"]
    if report["trained_rounds"] != list(range(1, cfg.fl.rounds + 1)):
        problems.append(f"train metrics for rounds {report['trained_rounds']}, expected 1..{cfg.fl.rounds}")
    for i, r in enumerate(per_round, 1):
        if r["replies"] != r["sent"] or r["errors"]:
            problems.append(f"round {i}: {r['sent']} sent, {r['replies']} replies, {r['errors']} errors")
    rounds = cfg.fl.rounds
    with np.load(out / "initial.npz") as z:
        initial = {k: z[k] for k in z.files}
    return {
        "initial": initial,
        "fl_s": report["fl_seconds"],
        "fit_s": None,
        **marks.split(rounds),
        **_phases(start, marks, rounds, report["main_end"], end),
        "updates": sum(r["replies"] - r["errors"] for r in per_round),
        "examples": sum(r["examples"] for r in per_round),
        "clients_per_round": [r["sent"] for r in per_round],
        "memory": mem.report(),
        "problems": problems,
        "components": {
            "aggregation (and leakbed's validation, shuffling, tap)": _steady(report["aggregation_seconds"]),
            "utility evaluation": _steady(report["evaluation_seconds"]),
        },
        "cpu": marks.steady_cpu(rounds),
    }


def _steady(per_round: list[float]) -> float:
    """The mean over rounds 2..R of a per-round duration (round 1 waits for the actors)."""
    rest = per_round[1:]
    return sum(rest) / len(rest) if rest else 0.0


def run_leakbed(cfg: ExperimentConfig, rule: str, out: Path, interval: tuple[float, float]) -> dict:
    """One leakbed run into the run folder ``out`` (see ``core.layout``), on a simulation SuperLink of its own."""
    from leakbed.core.data import federation
    from leakbed.core.layout import RunLayout
    from leakbed.core.store import UpdateStore
    from leakbed.simulate import SimulationLink, simulate

    marks = CpuMarks()
    memory = TreeMemory(interval=interval[0], pss_interval=interval[1])
    with SimulationLink(out / "link-logs", own_ray=True) as link, memory as mem:
        start = time.time()
        summary = simulate(cfg, rule, out, marks, link)
        end = time.time()

    fed = federation(cfg, rule)
    layout = RunLayout(out)
    truth = [json.loads(line) for line in (layout.referee(rule) / "truth.jsonl").read_text().splitlines() if line]
    examples = sum(len(fed.splits[t["user_id"]].private) for t in truth)
    logs = summary["rounds_log"]
    problems = [f"round {r}: {s}" for r, s in logs.items() if s["received"] != s["sampled"] or s["failed"] or s["rejected"]]
    if sorted(int(r) for r in logs) != list(range(1, cfg.fl.rounds + 1)):
        problems.append(f"rounds logged {sorted(logs)}")
    pool = summary["pool"]
    if pool["tapped"] != pool["analysed"] or pool["errors"]:
        problems.append(f"pool: tapped {pool['tapped']}, analysed {pool['analysed']}, errors {pool['errors'][:3]}")
    starts = run_starts(out, rule)
    if starts > 1:  # the whole-run time holds a failed Ray start; the rounds themselves are those of the last start
        problems.append(f"the run needed {starts} starts (Ray failed to come up): its whole-run time includes the failed ones")
    main_end = (layout.results(rule) / "metrics.json").stat().st_mtime  # run_federation writes it last
    ordered = [logs[str(r)] for r in sorted(int(k) for k in logs)]
    return {
        "initial": UpdateStore(layout.store(rule)).read_global(1),  # the model round 1 sent: the initial one
        "fl_s": summary["fl_seconds"],
        "fit_s": summary["attack_fit_seconds"],
        **marks.split(cfg.fl.rounds),
        **_phases(start, marks, cfg.fl.rounds, main_end, end),
        "updates": len(truth),
        "examples": examples,
        "clients_per_round": [r["sampled"] for r in ordered],
        "memory": mem.report(),
        "problems": problems,
        "pool": {k: pool[k] for k in POOL_KEYS}
        | {"fit_seconds": pool["fit_seconds"], "errors": pool["errors"][:3]}
        | pool_timeline(layout.store(rule), marks, cfg.fl.rounds),
        "attackers": {n: {k: m[k] for k in ("ap", "chance_ap", "x_chance", "top1")} for n, m in summary["attackers"].items()},
        "components": {
            "aggregation (and leakbed's validation, shuffling, tap)": _steady([r["aggregation_seconds"] for r in ordered]),
            "utility evaluation": _steady([r["evaluation_seconds"] for r in ordered]),
        },
        "cpu": marks.steady_cpu(cfg.fl.rounds),
    }


def _phases(start: float, marks: RoundMarks, rounds: int, main_end: float | None, end: float) -> dict[str, float | None]:
    """Whole run split by wall-clock marks: before round 1, after the last round, teardown after the ServerApp."""
    first, last = marks.wall.get(0), marks.wall.get(rounds)
    return {
        "whole_s": end - start,
        "pre_s": first - start if first else None,
        "post_s": main_end - last if main_end and last else None,
        "teardown_s": end - main_end if main_end else None,
    }


def _same_initial(a: dict | None, b: dict | None) -> bool | None:
    import numpy as np

    if a is None or b is None:
        return None
    return set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)


TIMES = ("whole_s", "pre_s", "fl_s", "round1_s", "steady_round_s", "post_s", "fit_s", "teardown_s")


def _medians(rs: list[dict]) -> dict[str, float | None]:
    med = {k: median([r[k] for r in rs]) for k in TIMES}
    med["peak_rss_mib"] = median([r["memory"]["peak_tree_rss_mib"] for r in rs])
    med["peak_pss_mib"] = median([r["memory"]["peak_tree_pss_mib"] for r in rs])
    return med


def _median_maps(maps: list[dict[str, float]]) -> dict[str, float]:
    """Key-wise median of dicts (a key missing from a run counts as 0 there)."""
    keys = {k for m in maps for k in m}
    return {k: median([m.get(k, 0.0) for m in maps]) or 0.0 for k in sorted(keys)}


def breakdown(pl: dict, lk: dict, cores: int) -> tuple[list[list[object]], dict]:
    """Rows explaining the steady-round gap (leakbed - plain), and the same as JSON.

    Server-side work runs in the ServerApp between a round's last reply and the next round's start, so its seconds
    add to the round one for one (plain's own aggregation and evaluation are subtracted). The attack workers run
    beside the client actors: their CPU seconds per round, spread over the host's cores, estimate what they took
    from the clients (exact when clients and workers compete for every core, as on a small machine). The rest is
    what neither accounts for: the Simulation Runtime's scheduling, the sampler and noise of a shared machine.
    """
    gap = (lk["steady_round_s"] or 0.0) - (pl["steady_round_s"] or 0.0)
    lc, pc = lk["components"], pl["components"]
    rows: list[list[object]] = []
    explained = 0.0
    out: dict[str, dict[str, float | None]] = {}

    def share(x: float) -> float | None:
        return x / gap if gap > 0 else None

    for name in dict.fromkeys([*lc, *pc]):
        extra = lc.get(name, 0.0) - pc.get(name, 0.0)
        explained += extra
        out[name] = {"plain_s": pc.get(name), "leakbed_s": lc.get(name), "extra_s": extra}
        rows.append([f"  {name}", pc.get(name), lc.get(name, 0.0), extra, share(extra)])
    workers = sum(v for k, v in lk["cpu"].items() if "attack" in k)
    compete = workers / cores
    explained += compete
    out["attack workers competing for cores"] = {"cpu_s": workers, "extra_s": compete}
    rows.append([f"  attack workers: {workers:.2f} CPU-s/round over {cores} cores", 0.0, compete, compete, share(compete)])
    rest = gap - explained
    out["rest"] = {"extra_s": rest}
    rows.append(["  rest (scheduling, sampler, noise)", None, None, rest, share(rest)])
    rows.append(["steady-round gap leakbed - plain [s]", pl["steady_round_s"], lk["steady_round_s"], gap, share(gap)])
    return rows, {"gap_s": gap, "components": out}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.overhead", description=__doc__.split("\n\n")[0])
    p.add_argument("--users", type=int, default=30, help="synthetic users = virtual SuperNodes (default 30)")
    p.add_argument("--rounds", type=int, default=5, help="FL rounds (default 5)")
    p.add_argument("--fraction", type=float, default=0.2, help="fraction of clients per round C (default 0.2)")
    p.add_argument("--repeats", type=int, default=1, help="pairs of runs; the order alternates, medians are reported (default 1)")
    p.add_argument(
        "--plain-evaluate",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="give plain FedAvg leakbed's centralised utility evaluation after each round, like with like (default); "
        "--no-plain-evaluate: a no-op evaluate_fn, which counts the evaluation as overhead",
    )
    p.add_argument("--only", choices=["plain", "leakbed"], help="run one side only (for debugging; no ratios)")
    add_common_args(p)
    args = p.parse_args(argv)

    from leakbed.core.config import dump_config, load_config
    from leakbed.core.data import federation
    from leakbed.core.models import build_model

    cfg = load_config(
        args.config,
        [
            f"data.synthetic.users={args.users}",
            f"fl.rounds={args.rounds}",
            f"fl.fraction_train={args.fraction}",
            f"seed={args.seed}",
            "fl.startup_timeout=1200",  # a loaded host can take minutes to start Ray's actors (the default 300 s fails runs)
            *args.set,
        ],
    )
    t0 = time.perf_counter()
    fed = federation(cfg, args.rule)  # warm this process' cache for both runs; not timed
    build_model(cfg.model, fed.corpus)
    warm = time.perf_counter() - t0
    users = len(fed.user_ids)
    kinds = [args.only] if args.only else ["plain", "leakbed"]
    settings = {
        "users (virtual SuperNodes)": f"{users} (of {cfg.data.synthetic.users} generated; min_examples {cfg.data.min_examples})",
        "rounds": cfg.fl.rounds,
        "fraction_train C": cfg.fl.fraction_train,
        "clients per round": max(int(users * cfg.fl.fraction_train), 1),
        "prior rule": args.rule,
        "seed": cfg.seed,
        "repeats": args.repeats,
        "runs": " + ".join(kinds),
        "plain server-side evaluation": args.plain_evaluate,
        "attack workers / suite": f"{cfg.workers.count} / {', '.join(cfg.attack.suite)}",
        "client resources": f"{cfg.simulation.client_cpus} CPU, {cfg.simulation.client_gpus} GPU per actor",
        "host CPUs": os.cpu_count(),
        "driver warm-up (federation + model, not timed)": f"{warm:.2f} s",
    }
    print_config("benchmarks.overhead: plain Flower FedAvg vs leakbed, same workload", settings, dump_config(cfg))

    intervals = (args.interval, args.pss_interval)
    load_before = os.getloadavg()[0]
    runs: dict[str, list[dict]] = {kind: [] for kind in kinds}
    with out_dir(args.out, "leakbed-overhead-") as out:
        for i in range(args.repeats):
            for kind in kinds if i % 2 == 0 else kinds[::-1]:
                print(f"-- repeat {i + 1}/{args.repeats}: {kind} ...", flush=True)
                if kind == "plain":
                    res = run_plain(cfg, args.rule, args.plain_evaluate, fresh(out / f"plain-{i + 1}"), intervals)
                else:
                    res = run_leakbed(cfg, args.rule, fresh(out / f"leakbed-{i + 1}"), intervals)
                runs[kind].append(res)
                trouble = f", PROBLEMS: {res['problems']}" if res["problems"] else ""
                print(
                    f"   {kind}: FL {fmt(res['fl_s'])} s, whole {fmt(res['whole_s'])} s, "
                    f"peak tree RSS {res['memory']['peak_tree_rss_mib']} MiB{trouble}",
                    flush=True,
                )

        med = {kind: _medians(rs) for kind, rs in runs.items()}
        empty = dict.fromkeys(TIMES + ("peak_rss_mib", "peak_pss_mib"))
        pl, lk = med.get("plain", empty), med.get("leakbed", empty)
        for kind, m in (("plain", pl), ("leakbed", lk)):
            m["components"] = _median_maps([r["components"] for r in runs.get(kind, [])])
            m["cpu"] = _median_maps([r["cpu"] for r in runs.get(kind, [])])

        def ratio(key: str) -> float | None:
            a, b = lk[key], pl[key]
            return a / b if a is not None and b else None

        def first(kind: str, key: str) -> object:
            return runs[kind][0][key] if runs.get(kind) else None

        labels = {
            "whole_s": "whole run [s]",
            "pre_s": "  before round 1: set-up (Ray start overlaps) [s]",
            "fl_s": "  FL rounds: strategy.start [s]",
            "round1_s": "    round 1 (waits for Ray actors) [s]",
            "steady_round_s": "    mean of rounds 2..R [s]",
            "post_s": "  after the last round: fit, close, score [s]",
            "fit_s": "    attack drain + fit (metrics.json) [s]",
            "teardown_s": "  teardown: actors, Ray shutdown [s]",
            "peak_rss_mib": "peak RSS of the process tree [MiB]",
            "peak_pss_mib": "peak PSS of the process tree [MiB]",
        }
        # no ratio where plain does nothing by construction (its main only runs strategy.start)
        rows: list[list[object]] = [
            [labels[k], pl[k], lk[k], None if k in ("pre_s", "post_s", "fit_s") else ratio(k)] for k in labels
        ]
        rows.append(["updates trained", first("plain", "updates"), first("leakbed", "updates"), None])
        rows.append(["examples trained", first("plain", "examples"), first("leakbed", "examples"), None])
        n = f" (median of {args.repeats})" if args.repeats > 1 else ""
        like = "same per-round evaluation in both" if args.plain_evaluate else "plain WITHOUT evaluation: not like with like"
        load = f"load average (1 min) {load_before:.1f} before, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} CPUs"
        print(f"\n== results{n}; {like}; {load}")
        print(table(["", "plain FedAvg", "leakbed", "leakbed/plain"], rows))

        mem_key = "peak_pss_mib" if lk["peak_pss_mib"] and pl["peak_pss_mib"] else "peak_rss_mib"
        verdicts = {
            "steady_round": (ratio("steady_round_s"), GOALS["steady_round_s"]),
            "whole_run": (ratio("whole_s"), GOALS["whole_s"]),
            f"memory ({mem_key[5:8].upper()})": (ratio(mem_key), GOALS["memory"]),
        }
        print(
            "goals: "
            + "; ".join(
                f"{k} {fmt(v)}x (<= {g}: {'yes' if v is not None and v <= g else 'NO'})" for k, (v, g) in verdicts.items()
            )
        )
        explain: dict = {}
        if runs.get("plain") and runs.get("leakbed"):
            brows, explain = breakdown(pl, lk, os.cpu_count() or 1)
            print("\n== where the steady round goes (seconds per round 2..R; plain's own share subtracted)")
            print(table(["", "plain", "leakbed", "leakbed extra", "share of gap"], brows))
            kinds = list(dict.fromkeys([*lk["cpu"], *pl["cpu"]]))
            extra_cpu = {k: lk["cpu"].get(k, 0.0) - pl["cpu"].get(k, 0.0) for k in kinds}
            more = sum(v for v in extra_cpu.values() if v > 0)
            cpu_rows: list[list[object]] = [
                [k, pl["cpu"].get(k), lk["cpu"].get(k), extra_cpu[k], extra_cpu[k] / more if more else None] for k in kinds
            ]
            cpu_rows.append(["all", sum(pl["cpu"].values()), sum(lk["cpu"].values()), sum(extra_cpu.values()), None])
            explain["extra_cpu_s"] = extra_cpu
            print(
                "\n== CPU seconds per steady round by process (on a loaded host a round stretches with the CPU it needs,\n"
                "   so the shares of the extra CPU attribute the gap better than the idle-core estimate above)"
            )
            print(table(["", "plain", "leakbed", "leakbed extra", "share of extra CPU"], cpu_rows))
            mem = {kind: rs[-1]["memory"]["rss_mib_at_peak_by_process"] for kind, rs in runs.items()}
            mem_rows = [[k, mem["plain"].get(k), mem["leakbed"].get(k)] for k in dict.fromkeys([*mem["leakbed"], *mem["plain"]])]
            print("\n== RSS at the peak by process [MiB] (last run; RSS counts shared pages once per process)")
            print(table(["", "plain", "leakbed"], mem_rows))

        # both ServerApps seed torch with the config's seed before building the model: the same initial weights
        pairs = zip(runs.get("plain", []), runs.get("leakbed", []), strict=False)  # a failed run leaves one side short
        same_init = [_same_initial(p.get("initial"), q.get("initial")) for p, q in pairs]
        for i, res in enumerate(runs.get("leakbed", []), 1):
            pool = res["pool"]
            print(
                f"leakbed repeat {i}: pool tapped {pool['tapped']}, analysed {pool['analysed']}, dropped {pool['dropped']}, "
                f"failed {pool['failed']}; max lag {pool['max_lag_rounds']} round(s) by the pool's stat, "
                f"{fmt(pool['max_lag_rounds_from_files'])} by the store's file times; "
                f"pool busy {fmt(pool['pool_busy_after_fl_s'])} s after the last round"
            )
        if same_init:
            print(f"same initial model in plain and leakbed: {same_init}")
        for name, m in runs["leakbed"][-1]["attackers"].items() if runs.get("leakbed") else ():
            print(
                f"attacker {name}: AP {m['ap']:.3f} = {m['x_chance']:.2f} x chance ({m['chance_ap']:.3f}), top-1 {m['top1']:.3f}"
            )
        for kind, rs in runs.items():
            print(f"{kind} memory (last run): " + json.dumps({k: v for k, v in rs[-1]["memory"].items() if k != "samples"}))
        problems = {kind: [r["problems"] for r in rs if r["problems"]] for kind, rs in runs.items()}
        ok = not any(problems.values()) and all(s is not False for s in same_init)
        if not ok:
            print(f"PROBLEMS: {problems}; same initial model: {same_init}", file=sys.stderr)
        last = runs["leakbed"][-1]["pool"] if runs.get("leakbed") else {}
        pool_keys = (
            "tapped",
            "analysed",
            "dropped",
            "failed",
            "max_lag_rounds",
            "max_lag_rounds_from_files",
            "pool_busy_after_fl_s",
        )
        summary = {
            "benchmark": "overhead",
            "ok": ok,
            "users": users,
            "rounds": cfg.fl.rounds,
            "fraction": cfg.fl.fraction_train,
            "repeats": args.repeats,
            "seed": cfg.seed,
            "rule": args.rule,
            "plain_evaluate": args.plain_evaluate,
            "cpus": os.cpu_count(),
            "plain": med.get("plain"),
            "leakbed": med.get("leakbed"),
            "ratio": {k: ratio(k) for k in ("whole_s", "fl_s", "steady_round_s", "peak_rss_mib", "peak_pss_mib")},
            "goals": {k: {"ratio": v, "goal": g, "met": v is not None and v <= g} for k, (v, g) in verdicts.items()},
            "steady_gap": explain,
            "load": [load_before, os.getloadavg()[0]],
            "pool": {k: last.get(k) for k in pool_keys},
            "updates": {kind: rs[0]["updates"] for kind, rs in runs.items()},
            "examples": {kind: rs[0]["examples"] for kind, rs in runs.items()},
            "same_initial_model": same_init,
        }
        finish(out, bool(args.out), summary)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
