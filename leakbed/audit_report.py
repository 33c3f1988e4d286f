"""The empirical privacy audit in the report and on the console: each prior's ε_emp, with its interval, beside the
accountant's ε.

What ``metrics.json``'s ``audit`` holds (``server.canaries.audit_summary``), as one table: per view (the final model,
all iterates, Andrew et al.'s maximum over rounds), ε_emp with its 90% interval, the canaries per side and the fitted
spreads, Steinke et al.'s one-run lower bound beside the most it can show with this many canaries, and the flag (the
interval wholly above the accountant's ε: the run leaks more than its DP claims). The accountant's ε and the exact ε
head the table, the Poisson-sampling figure is named an approximation.
"""

from __future__ import annotations

import math
from pathlib import Path

from leakbed.core.audit import VIEWS
from leakbed.core.tables import markdown_table

HEADER = ["prior", "view", "ε accountant (exact)", "ε_emp [90% interval]", "canaries in / out", "spread in / out (null)",
          "lower bound (most it can show)", "flag"]  # fmt: skip
FLAG = "leaks more than claimed"


def _eps(value: object) -> str:
    if value is None:
        return "∞"
    v = float(value)  # type: ignore[arg-type]
    return "∞" if math.isinf(v) else f"{v:.2f}"


def _spread(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def estimate_cell(est: dict) -> str:
    """``ε_emp [lo, hi]``."""
    lo, hi = est["interval"]
    return f"{_eps(est['epsilon_emp'])} [{_eps(lo)}, {_eps(hi)}]"


def sweep_audit_cells(row: dict) -> list[str]:
    """A sweep row's audit cells (``sweep.tradeoff_rows``): ε_emp [interval], canaries in / out, the lower bound (the
    most it can show), the flag; dashes for a point without an audit."""
    if row.get("epsilon_emp") is None:
        return ["-", "-", "-", ""]
    lo, hi = row["epsilon_emp_interval"]
    return [f"{_eps(row['epsilon_emp'])} [{_eps(lo)}, {_eps(hi)}]", " / ".join(map(str, row["canaries_in_out"])),
            f"{_eps(row['epsilon_lower_bound'])} ({_eps(row['lower_bound_ceiling'])})",
            FLAG if row.get("audit_flagged") else ""]  # fmt: skip


def audit_rows(runs: dict[str, dict]) -> list[list[str]]:
    """A row per prior and view, for every prior whose run was audited."""
    rows = []
    for rule, run in runs.items():
        audit = run.get("audit")
        if not audit:
            continue
        claim = f"{_eps(audit.get('epsilon_accountant'))} ({_eps(audit.get('epsilon_exact'))})"
        for view in VIEWS:
            est = audit.get(view)
            if not est:
                continue
            rows.append([
                rule, view, claim, estimate_cell(est), f"{est['inserted']} / {est['held_out']}",
                f"{_spread(est['spread_inserted'])} / {_spread(est['spread_held_out'])} ({_spread(est['spread_null'])})",
                f"{_eps(est['epsilon_lower_bound'])} ({_eps(est['lower_bound_ceiling'])})",
                FLAG if est.get("above_accountant") else "",
            ])  # fmt: skip
    return rows


def audit_caption(runs: dict[str, dict]) -> str:
    """What the numbers mean, in one paragraph: δ, the interval, the fits, the bound's ceiling, the accountant."""
    audit = next((r["audit"] for r in runs.values() if r.get("audit")), None)
    if audit is None:
        return ""
    text = (
        f"Canary clients (Andrew et al., ICLR 2024) with secret random directions at L2 norm {audit['norm']:g} (far "
        f"above the clipping norm: the device's clipper must act), each inserted with probability 1/2, "
        f"{audit['per_round']} replying a round, judged from what the server releases; ε at δ = {audit['delta']:g}. "
        f"ε_emp: the Gaussian mechanism's ε at the shift between inserted and held-out canaries' statistics in units of "
        f"their common spread, with a {100 * audit.get('level', 0.9):.0f}% interval; the final model's null is known (a "
        f"random direction's cosine in d = {audit.get('dimension', '?')} dimensions: spread 1/sqrt(d)), the other views "
        f"fit one spread to both sides. Lower bound: Steinke et al. (NeurIPS 2023), one run, "
        f"{100 * audit['confidence']:.0f}% confidence; in brackets the most {audit['candidates']} canaries can show (every "
        f"guess right). Accountant: {audit['accountant']}"
    )
    if audit.get("amplification"):
        text += f"; with sampling, ε ≈ {_eps(audit.get('epsilon_poisson_approximation'))} ({audit['amplification']})"
    if any(run.get("audit", {}).get("flagged") for run in runs.values()):
        text += (f". '{FLAG}': the ε_emp interval lies wholly above the accountant's ε: the mechanism does not deliver "
                 "the guarantee its defense claims (noise or clipping missing or loose on a path)")  # fmt: skip
    return text + "."


def audit_section(runs: dict[str, dict]) -> list[str]:
    """The report's section, or nothing for a run without an audit."""
    rows = audit_rows(runs)
    if not rows:
        return []
    flags = [f"**{rule}: {run['audit']['flag']}.**" for rule, run in runs.items() if run.get("audit", {}).get("flag")]
    return ["## Empirical privacy audit", "", *flags, *([""] if flags else []), markdown_table(HEADER, rows), "",
            audit_caption(runs), ""]  # fmt: skip


def plot_epsilon(rows: list[dict], path: Path) -> bool:
    """The sweep's privacy figure: per defense, the accountant's ε and the exact ε, ε_emp with its interval and the
    lower bound against the noise multiplier (log scale), each point labelled with its utility; False (nothing
    written) without audited points."""
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
        if all(r.get("epsilon_exact") is not None for r in curve):
            ax.plot(z, [r["epsilon_exact"] for r in curve], "-", color=color, alpha=0.4, label=f"{label}: ε exact (PLD)")
        emp = [r["epsilon_emp"] for r in curve]
        err = [[max(0.0, e - r["epsilon_emp_interval"][0]) for e, r in zip(emp, curve, strict=True)],
               [max(0.0, r["epsilon_emp_interval"][1] - e) for e, r in zip(emp, curve, strict=True)]]  # fmt: skip
        ax.errorbar(z, emp, yerr=err, fmt="--s", color=color, capsize=3, label=f"{label}: ε_emp, 90% interval")
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
