"""Results pages from committed run summaries: every generated table of ``docs/`` is written here, never by hand.

A summary (``docs/results/data/<name>.json``) holds the numbers of one finished run or sweep and the command that
produced it; a page marks where a table goes with ``<!-- generated: <name> -->`` ... ``<!-- /generated -->``.

    python -m leakbed.reference.results summarize run RUN_DIR --name NAME --command "leakbed run ..."
    python -m leakbed.reference.results summarize sweep SWEEP_DIR --name NAME --command "leakbed sweep ..."
    python -m leakbed.reference.results write          # rewrite every generated table of docs/ and README.md

``tests/docs/test_results.py`` re-renders every table and fails when a page and its summary disagree.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "results" / "data"
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")))
REGION = re.compile(r"(<!-- generated: (?P<name>[\w.-]+) -->\n)(?P<body>.*?)(<!-- /generated -->)", re.S)
ATTACKERS = {"mlp": "MLP", "svm": "SVM", "knn": "kNN"}


def summarize_run(run_dir: Path, command: str) -> dict:
    """The closed-world numbers of a finished ``leakbed run``: per prior and attacker AP, chance AP, top-1/5."""
    metrics = json.loads((run_dir / "metrics.json").read_text())
    priors = [p for p in metrics if isinstance(metrics[p], dict) and p != "attack_sandbox"]
    table = {p: {a: {k: metrics[p][a][k] for k in ("ap", "chance_ap", "x_chance", "top1", "top5")}
                 for a in ATTACKERS if a in metrics[p]} for p in priors}  # fmt: skip
    users = json.loads((run_dir / priors[0] / "metrics.json").read_text())["users"]
    return {"kind": "run", "command": command, "priors": table, "users": users}


def summarize_sweep(sweep_dir: Path, command: str) -> dict:
    """A finished ``leakbed sweep``'s privacy-utility rows (``tradeoff.json``)."""
    keep = ("point", "defense", "prior", "utility", "utility_norm", "epsilon", "mlp_x_chance", "svm_x_chance", "knn_x_chance")
    rows = json.loads((sweep_dir / "tradeoff.json").read_text())
    return {"kind": "sweep", "command": command, "rows": [{k: r.get(k) for k in keep} for r in rows]}


def _pct(v: float) -> str:
    return f"{100 * v:.1f}"


def run_table(summary: dict) -> str:
    """The Table-3-form table the report prints: AP % (× chance), top-1 %, top-5 % per prior."""
    priors = list(summary["priors"])
    head = "| attacker | " + " | ".join(f"{p} AP | {p} top-1 | {p} top-5" for p in priors) + " |"
    lines = [head, "|---|" + "---|" * (3 * len(priors))]
    first = summary["priors"][priors[0]]
    for key, label in ATTACKERS.items():
        if key not in first:
            continue
        cells = []
        for p in priors:
            m = summary["priors"][p][key]
            cells += [f"{_pct(m['ap'])} ({m['x_chance']:.0f}×)", _pct(m["top1"]), _pct(m["top5"])]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    chance = [cell for p in priors for cell in _chance(summary, p)]
    lines.append("| Chance | " + " | ".join(chance) + " |")
    return "\n".join(lines)


def _chance(summary: dict, prior: str) -> list[str]:
    """Chance AP (exact, on the same updates), and top-1 / top-5 of a random guess among the users."""
    any_attacker = next(iter(summary["priors"][prior].values()))
    users = summary["users"]
    return [f"{_pct(any_attacker['chance_ap'])} (1×)", _pct(1 / users), _pct(min(5, users) / users)]


def sweep_table(summary: dict) -> str:
    """One row per sweep point: × chance per attacker, utility normalised to the undefended run, ε."""
    lines = ["| point | MLP × chance | SVM × chance | kNN × chance | utility (÷ undefended) | ε |", "|---|---|---|---|---|---|"]
    for r in summary["rows"]:
        eps = "—" if r["epsilon"] is None else f"{r['epsilon']:.3g}"
        xs = [f"{r[f'{a}_x_chance']:.1f}" if r[f"{a}_x_chance"] is not None else "—" for a in ATTACKERS]
        lines.append(f"| {r['point']} | {' | '.join(xs)} | {r['utility']:.3f} ({r['utility_norm']:.2f}) | {eps} |")
    return "\n".join(lines)


RENDER: dict[str, Callable[[dict], str]] = {"run": run_table, "sweep": sweep_table}


def render(name: str) -> str:
    """The generated block for summary ``name``: its command, then its table."""
    summary = json.loads((DATA / f"{name}.json").read_text())
    table = RENDER[summary["kind"]](summary)
    source = f"Generated from `docs/results/data/{name}.json`, the summary of:"
    return f"{source}\n\n```bash\n{summary['command']}\n```\n\n{table}\n"


def rendered(text: str) -> str:
    """``text`` with every generated region re-rendered from its summary."""
    return REGION.sub(lambda m: m.group(1) + render(m["name"]) + m.group(4), text)


def write() -> list[Path]:
    changed = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        new = rendered(text)
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed.append(page)
    return changed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m leakbed.reference.results", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="action", required=True)
    s = sub.add_parser("summarize", help="write docs/results/data/NAME.json from a finished run or sweep folder")
    s.add_argument("kind", choices=["run", "sweep"])
    s.add_argument("folder", type=Path)
    s.add_argument("--name", required=True)
    s.add_argument("--command", required=True, help="the command that produced the folder")
    sub.add_parser("write", help="rewrite every generated table of the docs from its summary")
    args = p.parse_args(argv)
    if args.action == "summarize":
        make = summarize_run if args.kind == "run" else summarize_sweep
        DATA.mkdir(parents=True, exist_ok=True)
        (DATA / f"{args.name}.json").write_text(json.dumps(make(args.folder, args.command), indent=1) + "\n")
        print(f"written: docs/results/data/{args.name}.json")
    else:
        for page in write():
            print(f"rewritten: {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
