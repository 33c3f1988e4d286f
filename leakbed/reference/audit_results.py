"""The privacy audit's results page: a finished sweep's (or run's) audit rows, summarised and rendered.

    python -m leakbed.reference.results summarize audit SWEEP_OR_RUN_DIR --name NAME --command "leakbed sweep ..."

One row per run and prior: the setting, the noise multiplier, the accountant's ε (and with amplification), the
canaries' ε estimate (Andrew et al.) and one-run lower bound (Steinke et al.) for all iterates and the final model,
the utility, and the re-identification attacks' × chance; the papers' figures beside them in kind.
"""

from __future__ import annotations

import json
from pathlib import Path

from leakbed.core.tables import markdown_table

# What the papers report in kind (as the issue quotes them): a one-run lower bound against the analytical ε.
PAPERS = [
    ["Steinke, Nasr, Jagielski (NeurIPS 2023)", "white-box DP-SGD, CIFAR-10, one run, m canaries",
     "ε = 4: lower bound ≈ 1.8 (ratio 0.45)"],
    ["Maddock et al., CANIFE (ICLR 2023)", "crafted canary clients, realistic FL, per round",
     "empirical ε several times below the theoretical bound"],
    ["Andrew et al. (ICLR 2024)", "random-direction canary clients, user-level DP-FedAvg, one run",
     "ε estimated for the final model and for all iterates beside the analytical ε"],
]  # fmt: skip


def _runs(folder: Path) -> list[tuple[str, Path]]:
    """(label, run folder) of a sweep's points (each a run folder), or of one run."""
    if (folder / "tradeoff.json").exists():
        return [(p.name, p) for p in sorted(folder.iterdir()) if p.is_dir() and (p / "metrics.json").exists()]
    return [(folder.name, folder)]


def _row(label: str, prior: str, run: dict) -> dict:
    audit = run.get("audit") or {}
    privacy = next((p for p in run.get("privacy", []) if "epsilon" in p), {})
    views = {v: {k: audit[v][k] for k in ("epsilon_andrew", "epsilon_lower_bound")} for v in ("all iterates", "final model")
             if v in audit}  # fmt: skip
    return {
        "label": label,
        "prior": prior,
        "defense": privacy.get("defense") or "none",
        "noise_multiplier": privacy.get("noise_multiplier"),
        "clip": privacy.get("clip"),
        "rounds": run["rounds"],
        "canaries": {k: audit.get(k) for k in ("candidates", "inserted", "per_round", "norm")} if audit else None,
        "epsilon": privacy.get("epsilon"),
        "epsilon_amplified": audit.get("epsilon_accountant_amplified"),
        "delta": audit.get("delta", privacy.get("delta")),
        "views": views,
        "utility": run["utility"][str(run["rounds"])]["utility"],
        "x_chance": {a: m["x_chance"] for a, m in run.get("attackers", {}).items()},
    }


def summarize_audit(folder: Path, command: str) -> dict:
    """Every run of a finished sweep (or one run) with its audit, per prior."""
    rows = []
    for label, run_dir in _runs(folder):
        for prior_dir in sorted(p for p in run_dir.iterdir() if (p / "metrics.json").exists()):
            rows.append(_row(label, prior_dir.name, json.loads((prior_dir / "metrics.json").read_text())))
    return {"kind": "audit", "command": command, "rows": rows}


def _e(v: float | None) -> str:
    return "∞" if v is None else f"{v:.2f}"


def audit_table(summaries: list[dict]) -> str:
    """Our rows, then the papers' figures in kind."""
    header = ["run", "defense (z)", "ε accountant (amplified)", "ε_emp all iterates / final", "lower bound all / final",
              "ε_emp / ε, bound / ε", "utility", "re-identification × chance"]  # fmt: skip
    rows = []
    for summary in summaries:
        for r in summary["rows"]:
            all_, final = r["views"].get("all iterates"), r["views"].get("final model")
            emp = "—" if not all_ else f"{_e(all_['epsilon_andrew'])} / {_e(final['epsilon_andrew'])}"
            low = "—" if not all_ else f"{_e(all_['epsilon_lower_bound'])} / {_e(final['epsilon_lower_bound'])}"
            ratio = "—"
            if all_ and r["epsilon"]:
                ratio = f"{all_['epsilon_andrew'] / r['epsilon']:.2f}, {all_['epsilon_lower_bound'] / r['epsilon']:.2f}"
            z = "" if r["noise_multiplier"] is None else f" ({r['noise_multiplier']:g})"
            amp = "" if r["epsilon_amplified"] is None or r["epsilon"] is None else f" ({_e(r['epsilon_amplified'])})"
            xs = ", ".join(f"{a} {x:.1f}×" for a, x in r["x_chance"].items())
            eps = f"{_e(r['epsilon'])}{amp}"
            rows.append([r["label"], f"{r['defense']}{z}", eps, emp, low, ratio, f"{r['utility']:.3f}", xs])
    ours = markdown_table(header, rows)
    return f"{ours}\n\nThe papers, in kind:\n\n{markdown_table(['paper', 'setting', 'reported'], PAPERS)}"
