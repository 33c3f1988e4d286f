"""Print issue 12's table (README, "What the shuffler leaves behind") from finished run folders.

    .venv/bin/python scripts/metadata_table.py runs/issue12/synthetic runs/issue12/iid ...
    .venv/bin/python scripts/metadata_table.py --sweep runs/issue12/sweep

One row per run (or sweep point): metadata-only, weights-only and fused re-identification (× chance,
best weight attacker by AP), linkage pair AP × chance and ARI (metadata + Δw), one-prior-example
re-identification alone / linked, the intersection attack alone / linked / with perfect linking
(× chance), and utility. Reads each prior's ``metrics.json``; computes nothing new.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from leakbed.core.tables import markdown_table


def _x(m: dict | None, key: str = "x_chance") -> str:
    v = (m or {}).get(key, float("nan"))
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.2f}"


def rows(run: Path, label: str) -> list[list[str]]:
    out = []
    for metrics in sorted(run.glob("*/metrics.json")):
        m = json.loads(metrics.read_text())
        suite = m.get("suite", {})
        meta, link = suite.get("metadata", {}), suite.get("linkage", {})
        weights = meta.get("weights", {})
        best = max(weights, key=lambda a: weights[a]["ap"]) if weights else None
        one, inter = link.get("one_example", {}), link.get("intersection", {})
        views = link.get("views", {})
        util = m["utility"][str(m["rounds"])]["utility"]
        out.append(
            [
                f"{label} ({m['prior']})",
                _x(meta),
                f"{_x(weights.get(best))} ({best})" if best else "-",
                _x(meta.get("fused", {}).get(best)) if best else "-",
                " / ".join(_x(views.get(v)) for v in ("meta", "w", "both")),
                _x(link, "ari"),
                f"{_x(one.get('alone'))} / {_x(one.get('linked'))}",
                f"{_x(inter.get('alone'))} / {_x(inter.get('linked'))} / {_x(inter.get('perfect_linking'))}",
                f"{util:.3f}",
            ]
        )
    return out


HEADER = [
    "run (prior)",
    "metadata × ch.",
    "weights × ch. (best)",
    "fused × ch.",
    "linkage pair AP × ch. meta / Δw / both",
    "ARI (both)",
    "1-example re-id × ch. alone / linked",
    "intersection × ch. alone / linked / perfect",
    "utility",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path)
    parser.add_argument("--sweep", type=Path, help="a sweep folder: one row per point")
    args = parser.parse_args()
    table = [r for run in args.runs for r in rows(run, run.name)]
    if args.sweep:
        table += [r for p in sorted(x for x in args.sweep.iterdir() if x.is_dir()) for r in rows(p, p.name)]
    print(markdown_table(HEADER, table))


if __name__ == "__main__":
    main()
