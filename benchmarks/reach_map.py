"""How far per-sample reconstruction reaches under FedAvg (issue 13 item 2), next to seed 004 Table 1 (FedSGD).

One ``leakbed run`` (Flower's Ray simulation, the real ServerApp/ClientApp, attack pool and referee)
per data set × local steps × batch size; each run's suite is ``feature-inference``, ``dlg`` and
``inverting-gradients`` on the updates tapped in its last round. A finished point (its
``metrics.json`` exists) is reused, so the map can be built up over several calls::

    nice -n 10 .venv/bin/python benchmarks/reach_map.py --out runs/reach-map
    nice -n 10 .venv/bin/python benchmarks/reach_map.py --data femnist --steps 1,5 --batches 1,8 --out runs/reach-map

It writes ``reach_map.md`` and ``reach_map.json`` into ``--out`` from every finished point found there.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CONFIGS = {"synthetic": REPO / "configs" / "reconstruction.toml", "femnist": REPO / "configs" / "femnist-reconstruction.toml"}
ATTACKS = ("dlg", "inverting-gradients", "feature-inference")
LABELS = {"dlg": "DLG", "inverting-gradients": "IG", "feature-inference": "deep features"}


def point_dir(out: Path, data: str, steps: int, batch: int) -> Path:
    return out / data / f"steps{steps}-batch{batch}"


def run_point(data: str, steps: int, batch: int, folder: Path, extra: list[str]) -> None:
    """One real run of the data set's config at ``steps`` local steps of batch ``batch``."""
    from core.config import load_config
    from leakbed.cli import QUIET_ENV, _progress, preflight, run_experiment

    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    sets = [f"fl.local_steps={steps}", f"fl.batch_size={batch}", f"name=reach-{data}-s{steps}-b{batch}", *extra]
    if data == "femnist":
        sets.append(f"data.path='{REPO.parent / 'shared' / 'data' / 'femnist'}'")
    cfg = load_config(CONFIGS[data], sets)
    preflight(cfg)
    with _progress() as bar:
        run_experiment(cfg, folder, bar, f"{data} steps={steps} batch={batch}: ")


def collect(out: Path) -> list[dict]:
    """Every finished point under ``out``: its setting and each attack's scores."""
    rows = []
    for data in CONFIGS:
        for metrics in sorted((out / data).glob("steps*-batch*/random/metrics.json")):
            name = metrics.parent.parent.name
            steps, batch = (int(p) for p in name.removeprefix("steps").split("-batch"))
            run = json.loads(metrics.read_text())
            rows.append({"data": data, "steps": steps, "batch": batch, "suite": run.get("suite", {})})
    return sorted(rows, key=lambda r: (r["data"], r["steps"], r["batch"]))


def _cell(m: dict | None) -> str:
    if not m or m.get("accuracy") is None:
        return "—"
    return f"{100 * m['accuracy']:.0f} / {100 * m['count_accuracy']:.0f}"


def markdown(rows: list[dict]) -> str:
    from referee.score_reconstruction import SEED_TABLE_1

    lines = [
        "| data | local steps | batch | samples U | updates | DLG | IG | deep features | chance | "
        "seed 004 Table 1 (CelebA, FedSGD): DLG / IG / proposed |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s = r["suite"]
        any_m = next((s[a] for a in ATTACKS if a in s and s[a].get("updates")), {})
        seed = (
            " / ".join(f"{SEED_TABLE_1[a][r['batch']]:.1f}" for a in ATTACKS)
            if r["steps"] == 1 and r["batch"] in SEED_TABLE_1["dlg"]
            else "—"
        )
        rate = any_m.get("property_rate")  # chance: the majority guess over the attacked samples, and the count guess
        chance = f"{100 * max(rate, 1 - rate):.0f} / {100 * any_m['count_chance']:.0f}" if rate is not None else "—"
        samples = f"{any_m['samples_mean']:.0f}" if any_m.get("samples_mean") is not None else "—"
        lines.append(
            f"| {r['data']} | {r['steps']} | {r['batch']} | {samples} | {any_m.get('updates', 0)} | "
            + " | ".join(_cell(s.get(a)) for a in ATTACKS)
            + f" | {chance} | {seed} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="synthetic,femnist", help="data sets: synthetic, femnist (comma-separated)")
    p.add_argument("--steps", default="1,5,20", help="local SGD steps per update (comma-separated)")
    p.add_argument("--batches", default="1,8,32", help="local batch sizes (comma-separated)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field at every point")
    p.add_argument("--out", default="runs/reach-map", help="folder of the points and the table")
    p.add_argument("--collect-only", action="store_true", help="only write the table from finished points")
    args = p.parse_args(argv)
    out = Path(args.out)
    datas = [d for d in args.data.split(",") if d]
    unknown = [d for d in datas if d not in CONFIGS]
    if unknown:
        p.exit(2, f"reach_map: unknown data set {unknown[0]!r}; known: {', '.join(CONFIGS)}\n")
    if not args.collect_only:
        for data in datas:
            for steps in (int(v) for v in args.steps.split(",")):
                for batch in (int(v) for v in args.batches.split(",")):
                    folder = point_dir(out, data, steps, batch)
                    if (folder / "random" / "metrics.json").is_file():
                        continue
                    if folder.exists():  # a point that did not finish: start it again
                        shutil.rmtree(folder)
                    run_point(data, steps, batch, folder, args.set)
    rows = collect(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "reach_map.json").write_text(json.dumps(rows, indent=2, default=float))
    table = markdown(rows)
    (out / "reach_map.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
