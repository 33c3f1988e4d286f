"""The empirical privacy audit in the report and on the console: each prior's ε estimates beside the accountant's.

What ``metrics.json``'s ``audit`` holds (``server.canaries.audit_summary``), as one table: the view (all iterates, the
final model), the accountant's ε (and with amplification by sampling), Andrew et al.'s estimate, Steinke et al.'s
lower bound at its confidence, and the ratio the issue's goal reads (lower bound / ε).
"""

from __future__ import annotations

import math
from pathlib import Path

from leakbed.core.tables import markdown_table

HEADER = ["prior", "view", "ε accountant", "ε amplified", "ε_emp (Andrew)", "ε lower bound", "bound / ε", "canaries"]
VIEWS = ("all iterates", "final model")


def _eps(value: object) -> str:
    if value is None:
        return "∞"
    v = float(value)  # type: ignore[arg-type]
    return "∞" if math.isinf(v) else f"{v:.2f}"


def audit_rows(runs: dict[str, dict]) -> list[list[str]]:
    """A row per prior and view, for every prior whose run was audited."""
    rows = []
    for rule, run in runs.items():
        audit = run.get("audit")
        if not audit:
            continue
        for view in VIEWS:
            est = audit.get(view)
            if not est:
                continue
            ratio = est.get("ratio_lower_bound")
            flag = " (passes ε!)" if est.get("exceeds_accountant") else ""
            rows.append([
                rule, view, _eps(audit.get("epsilon_accountant")), _eps(audit.get("epsilon_accountant_amplified")),
                _eps(est["epsilon_andrew"]), f"{_eps(est['epsilon_lower_bound'])}{flag}",
                "" if ratio is None else f"{ratio:.2f}",
                f"{audit['inserted']} of {audit['candidates']} ({audit['per_round']}/round)",
            ])  # fmt: skip
    return rows


def audit_caption(runs: dict[str, dict]) -> str:
    """What the numbers mean, in one paragraph: δ, confidence, the accountant's mode, the canaries' norm."""
    audit = next((r["audit"] for r in runs.values() if r.get("audit")), None)
    if audit is None:
        return ""
    text = (
        f"Canary clients (Andrew et al., ICLR 2024) with secret random directions at L2 norm {audit['norm']:g}, each "
        f"inserted with probability 1/2, judged from what the server releases; ε at δ = {audit['delta']:g}. "
        f"ε_emp: the ε of Gaussians fitted to inserted and held-out canaries' cosines; lower bound: Steinke et al. "
        f"(NeurIPS 2023), one run, {100 * audit['confidence']:.0f}% confidence. Accountant: {audit['accountant']}"
    )
    if audit.get("amplification"):
        text += f"; amplified: {audit['amplification']}"
    if any(run.get("audit", {}).get(v, {}).get("exceeds_accountant") for run in runs.values() for v in VIEWS):
        text += (". A lower bound above the accountant's ε means the mechanism or its accounting does not deliver "
                 "the guarantee claimed: a finding about this run's DP, not a rounding")  # fmt: skip
    return text + "."


def audit_section(runs: dict[str, dict]) -> list[str]:
    """The report's section, or nothing for a run without an audit."""
    rows = audit_rows(runs)
    if not rows:
        return []
    return ["## Empirical privacy audit", "", markdown_table(HEADER, rows), "", audit_caption(runs), ""]


def plot_epsilon(rows: list[dict], path: Path) -> bool:
    """The sweep's privacy figure: per defense, the accountant's ε, ε_emp and the lower bound against the noise
    multiplier (log scale), each point labelled with its utility; False (nothing written) without audited points."""
    points = [r for r in rows if r.get("epsilon_emp") is not None and r.get("noise_multiplier") is not None]
    if not points:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for n, label in enumerate(dict.fromkeys(r["defense"] for r in points)):
        curve = sorted((r for r in points if r["defense"] == label), key=lambda r: r["noise_multiplier"])
        z = [r["noise_multiplier"] for r in curve]
        color = f"C{n}"
        if all(r["epsilon"] is not None for r in curve):
            ax.plot(z, [r["epsilon"] for r in curve], "-", color=color, marker="o", label=f"{label}: ε accountant")
        ax.plot(z, [r["epsilon_emp"] for r in curve], "--", color=color, marker="s", label=f"{label}: ε_emp (Andrew)")
        ax.plot(z, [max(r["epsilon_lower_bound"], 1e-2) for r in curve], ":", color=color, marker="^",
                label=f"{label}: lower bound (Steinke)")  # fmt: skip
        for r in curve:
            ax.annotate(f"u {r['utility']:.2f}", (r["noise_multiplier"], r["epsilon_emp"]), fontsize=6,
                        textcoords="offset points", xytext=(3, 3))  # fmt: skip
    ax.set(xscale="log", yscale="log", xlabel="noise multiplier z", ylabel="ε (δ of the defense)",
           title="Privacy spent: accountant vs the canaries' audit (all iterates)")  # fmt: skip
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
