"""How far per-sample reconstruction reaches under FedAvg (issues 13 and 26), next to the papers' figures.

One ``leakbed run`` (Flower's simulation, the real ServerApp/ClientApp, sandboxed attack pool and referee) per
data set × local training; each run's suite is DLG, Inverting Gradients, seed 004's deep-feature inference and
the ``fedavg-inversion`` plugin (Dimitrov et al. 2022) on updates tapped in the last round. Two axes, as the
paper varies them: local steps S = 1, 5, 10 of batch 5 on devices of 50 examples (U = 5·S distinct images), and
local epochs E = 1, 5, 10 of devices of 10 examples in batches of 5 (2 steps an epoch, U = 10). Learning rate
0.01 (the paper's FEMNIST clients: 0.004). ``--defenses`` adds, on FEMNIST at E = 5, the same attacks against
DP-FedAvg (clip 0.5, noise 1.0), a batch of 10 instead of 5 and 50 local examples instead of 10.

A finished point (its ``metrics.json`` exists) is reused, so the map can be built up over several calls::

    nice -n 10 .venv/bin/python benchmarks/reach_map.py --out runs/reach-map
    nice -n 10 .venv/bin/python benchmarks/reach_map.py --data femnist --axes epochs --defenses --out runs/reach-map

It writes ``reach_map.md`` and ``reach_map.json`` into ``--out`` from every finished point found there.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from leakbed.core.tables import markdown_table

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CONFIGS = {
    "synthetic": REPO / "leakbed/configs/reconstruction.toml",
    "femnist": REPO / "leakbed/configs/femnist-reconstruction.toml",
}
ATTACKS = ("dlg", "inverting-gradients", "feature-inference", "fedavg-inversion")
UPDATES = 2  # attacked updates per attack and point (the last round's)
BATCH = 5
AXES = {  # axis -> (values, what one point sets, local examples per device)
    "steps": ((1, 5, 10), lambda v: [f"fl.local_steps={v}"], 50),
    "epochs": ((1, 5, 10), lambda v: ["fl.local_steps=0", f"fl.local_epochs={v}"], 10),
}
DEFENSES = {  # label -> what it sets, on FEMNIST at 5 epochs of 10 examples
    "dp-fedavg": ['defenses=[{name="dp-fedavg", clip=0.5, noise_multiplier=1.0}]'],
    "batch-10": ["fl.batch_size=10"],
    "50-examples": ["split.private_count=50"],
}


def attack_sets() -> list[str]:
    suite = "attack.suite=[" + ", ".join(f'"{a}"' for a in ATTACKS) + "]"
    sets = [suite, "workers.count=2", "fl.lr=0.01", f"fl.batch_size={BATCH}", "attack.params.fedavg-inversion.iterations=300"]
    sets.append(f"attack.params.fedavg-inversion.updates_per_round={UPDATES}")
    sets += [f"attack.params.{a}.updates={UPDATES}" for a in ATTACKS[:3]]
    return sets


def run_point(data: str, name: str, sets: list[str], folder: Path, extra: list[str]) -> None:
    """One real run of the data set's config with ``sets``."""
    from leakbed.cli import QUIET_ENV
    from leakbed.commands.experiment import preflight, run_experiment
    from leakbed.console import progress
    from leakbed.core.config import load_config

    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    sets = [*attack_sets(), *sets, f"name=reach-{data}-{name}", *extra]
    if data == "femnist":
        sets.append(f"data.path='{REPO.parent / 'shared' / 'data' / 'femnist'}'")
    cfg = load_config(CONFIGS[data], sets)
    preflight(cfg)
    with progress() as bar:
        run_experiment(cfg, folder, bar, f"{data} {name}: ")


def points(datas: list[str], axes: list[str], defenses: bool) -> list[tuple[str, str, list[str]]]:
    """(data, point name, its sets) for every point asked for."""
    out = []
    for data in datas:
        for axis in axes:
            values, sets_of, examples = AXES[axis]
            out += [(data, f"{axis}{v}", [*sets_of(v), f"split.private_count={examples}"]) for v in values]
    if defenses:
        base = [*AXES["epochs"][1](5), f"split.private_count={AXES['epochs'][2]}"]
        out += [("femnist", f"epochs5-{label}", [*base, *sets]) for label, sets in DEFENSES.items()]
    return out


def collect(out: Path) -> list[dict]:
    """Every finished point under ``out``: its name and each attack's scores."""
    rows = []
    for data in CONFIGS:
        for metrics in sorted((out / data).glob("*/random/metrics.json")):
            run = json.loads(metrics.read_text())
            rows.append({"data": data, "point": metrics.parent.parent.name, "suite": run.get("suite", {})})
    order = {name: i for i, (_, name, _) in enumerate(points(list(CONFIGS), list(AXES), True))}
    return sorted(rows, key=lambda r: (r["data"], order.get(r["point"], 99)))


def _rec(m: dict | None) -> str:
    if not m or m.get("psnr") is None:
        return "—"
    return f"{100 * m['recovered']:.0f} / {m['psnr']:.1f}"


def _prop(m: dict | None) -> str:
    return "—" if not m or m.get("accuracy") is None else f"{100 * m['accuracy']:.0f}"


def describe(point: str) -> str:
    """'S = 5 steps' / 'E = 10 epochs' / 'E = 5, dp-fedavg'."""
    head, _, defense = point.partition("-")
    axis = "steps" if head.startswith("steps") else "epochs"
    value = head.removeprefix(axis)
    text = f"S = {value} steps" if axis == "steps" else f"E = {value} epochs"
    return f"{text}, {defense}" if defense else text


def paper_femnist() -> dict:
    """Dimitrov et al.'s FEMNIST figure as the ``fedavg-inversion`` plugin declares it (``Scoring.reference``): learnt
    from its declaration (a sandboxed introspection, cached), never by importing the attack's module here."""
    from leakbed.core.config import WorkersConfig
    from leakbed.workers.introspect import for_workers

    return dict(for_workers(WorkersConfig()).declarations(["fedavg-inversion"])["fedavg-inversion"].scoring.reference)


def markdown(rows: list[dict]) -> str:
    from leakbed.referee.score_reconstruction import RECOVERED_PSNR

    PAPER_FEMNIST = paper_femnist()  # noqa: N806 - the paper's constant, as the plugin names it

    lines = [
        f"Images recovered % (PSNR > {RECOVERED_PSNR:g} dB) / mean PSNR dB; property: per-sample accuracy % (seed 004).",
        "",
    ]
    header = ["data", "local training", "U", "updates", "DLG", "IG", "FedAvg inversion", "prior images (chance)",
              "labels % (chance)", "property: DLG / IG / deep features / FedAvg inv. (chance)", "s per update"]  # fmt: skip
    cells = []
    for r in rows:
        s = r["suite"]
        f = s.get("fedavg-inversion", {})
        chance = f"{100 * f['recovered_chance']:.0f} / {f['psnr_chance']:.1f}" if f.get("psnr_chance") is not None else "—"
        labels = "—"
        if f.get("label_accuracy") is not None:
            labels = f"{100 * f['label_accuracy']:.0f} ({100 * f['label_chance']:.0f})"
        prop = " / ".join(_prop(s.get(a)) for a in ("dlg", "inverting-gradients", "feature-inference", "fedavg-inversion"))
        prop += f" ({100 * f['chance']:.0f})" if f.get("chance") is not None else ""
        samples = f"{f['samples_mean']:.0f}" if f.get("samples_mean") is not None else "—"
        secs = f"{f['seconds_per_update']:.0f}" if f.get("seconds_per_update") is not None else "—"
        cells.append([r["data"], describe(r["point"]), samples, str(f.get("updates", 0)), _rec(s.get("dlg")),
                      _rec(s.get("inverting-gradients")), _rec(f), chance, labels, prop, secs])  # fmt: skip
    lines += [
        markdown_table(header, cells),
        "",
        f"Dimitrov et al. 2022 (FEMNIST, {PAPER_FEMNIST['setting']}): more than {100 * PAPER_FEMNIST['recovered']:.0f}% "
        f"of images recovered by their attack, under {100 * PAPER_FEMNIST['baseline_recovered']:.0f}% by FedSGD-style "
        "attacks.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="synthetic,femnist", help="data sets: synthetic, femnist (comma-separated)")
    p.add_argument("--axes", default="steps,epochs", help="axes: steps, epochs (comma-separated)")
    p.add_argument("--defenses", action="store_true", help="add FEMNIST at E = 5 under DP-FedAvg, batch 10, 50 examples")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field at every point")
    p.add_argument("--out", default="runs/reach-map", help="folder of the points and the table")
    p.add_argument("--collect-only", action="store_true", help="only write the table from finished points")
    p.add_argument("--summary", help="also write the points' scores here (the docs' committed summary)")
    p.add_argument("--page", help="also write the table into this page's generated region (docs/results/reach-map.md)")
    args = p.parse_args(argv)
    out = Path(args.out)
    datas = [d for d in args.data.split(",") if d]
    axes = [a for a in args.axes.split(",") if a]
    unknown = [d for d in datas if d not in CONFIGS] + [a for a in axes if a not in AXES]
    if unknown:
        p.exit(2, f"reach_map: unknown data set or axis {unknown[0]!r}; known: {', '.join([*CONFIGS, *AXES])}\n")
    if not args.collect_only:
        for data, name, sets in points(datas, axes, args.defenses):
            folder = out / data / name
            if (folder / "random" / "metrics.json").is_file():
                continue
            if folder.exists():  # a point that did not finish: start it again
                shutil.rmtree(folder)
            run_point(data, name, sets, folder, args.set)
    rows = collect(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "reach_map.json").write_text(json.dumps(rows, indent=2, default=float))
    table = markdown(rows)
    (out / "reach_map.md").write_text(table)
    if args.summary:
        Path(args.summary).write_text(json.dumps(summary(rows), indent=1, sort_keys=True) + "\n")
    if args.page:
        write_region(Path(args.page), table)
    print(table)
    return 0


KEPT = ("recovered", "recovered_chance", "psnr", "psnr_chance", "label_accuracy", "label_chance", "accuracy", "chance",
        "samples_mean", "updates", "seconds_per_update")  # fmt: skip
REGION = ("<!-- reach-map table: benchmarks/reach_map.py --page -->", "<!-- /reach-map table -->")


def summary(rows: list[dict]) -> list[dict]:
    """What the table shows of each point (the docs keep this, not the runs)."""
    return [
        {"data": r["data"], "point": r["point"],
         "suite": {a: {k: m.get(k) for k in KEPT if k in m} for a, m in r["suite"].items() if a in ATTACKS}}
        for r in rows
    ]  # fmt: skip


def write_region(page: Path, table: str) -> None:
    """Replace the page's generated region with ``table``."""
    text = page.read_text()
    head, rest = text.split(REGION[0], 1)
    _, tail = rest.split(REGION[1], 1)
    page.write_text(f"{head}{REGION[0]}\n{table}{REGION[1]}{tail}")


if __name__ == "__main__":
    sys.exit(main())
