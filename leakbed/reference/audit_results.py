"""The privacy audit's results page: finished sweeps' (or runs') audit rows and the coverage benchmark, rendered.

    python -m leakbed.reference.results summarize audit SWEEP_OR_RUN_DIR --name NAME --command "leakbed sweep ..."
    python -m leakbed.reference.audit_coverage --seeds 1000 --runs 20   # docs/results/data/audit-coverage.json

One row per run and prior: the mechanism stated (defense, z) and, for a defense broken on purpose
(plugins/leakbed-broken-dp: its frozen config's ``noise_scale`` and ``clip_scale``), the mechanism delivered and its
exact ε; the accountant's ε and the exact one; ε_emp with its 90% interval for the final model and all iterates and
Andrew et al.'s maximum over rounds; the canaries per side; Steinke et al.'s lower bound beside the most it can show;
the flag; utility, the server's seconds per round and the re-identification attacks' × chance. The coverage table
says how often an honest run's interval holds the exact ε, and the ceiling table what one run's bound can show.
"""

from __future__ import annotations

import json
import math
import statistics
import tomllib
from pathlib import Path

from leakbed.core.audit import VIEWS
from leakbed.core.audit_bound import lower_bound_ceiling
from leakbed.core.privacy import pld_epsilon
from leakbed.core.tables import markdown_table

# What the papers report, in kind: their setting and what they measure, beside ours.
PAPERS = [
    ["Andrew et al. (ICLR 2024)", "random-direction canary clients (updates 1e4 x the clip), user-level DP-FedAvg, "
     "stackoverflow, 2,048 rounds of 167 clients, 1,000 canaries, one run",
     "ε_emp of the final model (known null) and of all iterates (max over rounds) beside the analytical ε"],
    ["Steinke, Nasr, Jagielski (NeurIPS 2023)", "white-box DP-SGD, CIFAR-10, one run, m canaries",
     "a lower bound on ε at 95%: ε = 4 gives ≈ 1.8 (ratio 0.45); capped by m (table below)"],
    ["Maddock et al., CANIFE (ICLR 2023)", "crafted canary clients, realistic FL, per round",
     "empirical ε several times below the theoretical bound"],
]  # fmt: skip
CANARY_COUNTS = (32, 64, 128, 200, 1024, 4096)


def _runs(folder: Path) -> list[tuple[str, Path]]:
    """(label, run folder) of a sweep's points (each a run folder) in the sweep's order, or of one run."""
    if (folder / "tradeoff.json").exists():
        points = dict.fromkeys(r["point"] for r in json.loads((folder / "tradeoff.json").read_text()))
        return [(p, folder / p) for p in points if (folder / p / "metrics.json").exists()]
    return [(folder.name, folder)]


def _delivered(run_dir: Path, privacy: dict, releases: int) -> dict | None:
    """A defense broken on purpose (its frozen config's ``noise_scale`` / ``clip_scale``): the noise multiplier it
    delivered relative to its clipping (z · noise_scale / clip_scale) and that mechanism's exact ε."""
    config = tomllib.loads((run_dir / "config.toml").read_text()) if (run_dir / "config.toml").exists() else {}
    entry = next((d for d in config.get("defenses", []) if {"noise_scale", "clip_scale"} & set(d)), None)
    if entry is None or privacy.get("noise_multiplier") is None:
        return None
    noise, clip = float(entry.get("noise_scale", 1.0)), float(entry.get("clip_scale", 1.0))
    z = float(privacy["noise_multiplier"]) * noise / clip
    return {"noise_scale": noise, "clip_scale": clip, "noise_multiplier": z,
            "epsilon_exact": pld_epsilon(z, releases, float(privacy["delta"]))}  # fmt: skip


def _row(label: str, prior: str, run: dict, run_dir: Path) -> dict:
    audit = run.get("audit") or {}
    privacy = next((p for p in run.get("privacy", []) if "epsilon" in p), {})
    keep = ("epsilon_emp", "interval", "inserted", "held_out", "spread_inserted", "spread_held_out", "spread_null",
            "epsilon_two_spreads", "epsilon_lower_bound", "lower_bound_ceiling", "above_accountant")  # fmt: skip
    rounds = run["rounds_log"].values()
    return {
        "label": label,
        "prior": prior,
        "defense": privacy.get("defense") or "none",
        "noise_multiplier": privacy.get("noise_multiplier"),
        "clip": privacy.get("clip"),
        "rounds": run["rounds"],
        "canaries": {k: audit.get(k) for k in ("candidates", "inserted", "per_round", "norm", "dimension")} if audit else None,
        "epsilon": privacy.get("epsilon"),
        "epsilon_exact": privacy.get("epsilon_exact"),
        "epsilon_poisson_approximation": audit.get("epsilon_poisson_approximation"),
        "delivered": _delivered(run_dir, privacy, int(privacy.get("releases", run["rounds"]))),
        "delta": audit.get("delta", privacy.get("delta")),
        "views": {v: {k: audit[v][k] for k in keep} for v in VIEWS if v in audit},
        "flagged": audit.get("flagged"),
        "utility": run["utility"][str(run["rounds"])]["utility"],
        "seconds": {"round": statistics.mean(r["seconds"] for r in rounds),
                    "aggregation": statistics.mean(r["aggregation_seconds"] for r in rounds)},  # fmt: skip
        "x_chance": {a: m["x_chance"] for a, m in run.get("attackers", {}).items()},
    }


def summarize_audit(folder: Path, command: str) -> dict:
    """Every run of a finished sweep (or one run) with its audit, per prior."""
    rows = []
    for label, run_dir in _runs(folder):
        for prior_dir in sorted(p for p in run_dir.iterdir() if (p / "metrics.json").exists()):
            rows.append(_row(label, prior_dir.name, json.loads((prior_dir / "metrics.json").read_text()), run_dir))
    return {"kind": "audit", "command": command, "rows": rows}


def _e(v: float | None) -> str:
    return "∞" if v is None or math.isinf(v) else f"{v:.2f}" if v < 100 else f"{v:.0f}"


def _estimate(view: dict | None) -> str:
    if not view:
        return "—"
    lo, hi = view["interval"]
    return f"{_e(view['epsilon_emp'])} [{_e(lo)}, {_e(hi)}]"


def _mechanism(r: dict) -> str:
    z = "" if r["noise_multiplier"] is None else f" (z {r['noise_multiplier']:g}, clip {r['clip']:g})"
    d = r.get("delivered")
    if d and (d["noise_scale"] != 1 or d["clip_scale"] != 1):
        broken = [f"{d['noise_scale']:g}x noise"] if d["noise_scale"] != 1 else []
        broken += [f"clips at {d['clip_scale']:g}x"] if d["clip_scale"] != 1 else []
        return f"{r['defense']}{z}: {', '.join(broken)}"
    return f"{r['defense']}{z}"


def audit_table(summaries: list[dict]) -> str:
    """One row per run and prior."""
    header = ["run", "mechanism stated: delivered", "ε accountant (exact)", "exact ε delivered",
              "ε_emp all iterates [90%]", "ε_emp final model [90%]", "max over rounds (Andrew)", "canaries in / out",
              "lower bound (most)", "flag", "utility", "s / round (aggregation)", "re-identification × chance"]  # fmt: skip
    rows = []
    for summary in summaries:
        for r in summary["rows"]:
            views = r["views"]
            every, maxed = views.get("all iterates"), views.get("all iterates (max)")
            claim = "∞" if r["epsilon"] is None else f"{_e(r['epsilon'])} ({_e(r['epsilon_exact'])})"
            delivered = r.get("delivered")  # a mechanism broken on purpose; else it delivers what it states
            true_eps = _e(delivered["epsilon_exact"] if delivered else r["epsilon_exact"])
            rows.append([
                r["label"], _mechanism(r), claim, true_eps, _estimate(every), _estimate(views.get("final model")),
                "—" if not maxed else _e(maxed["epsilon_emp"]),
                "—" if not every else f"{every['inserted']} / {every['held_out']}",
                "—" if not every else f"{_e(every['epsilon_lower_bound'])} ({_e(every['lower_bound_ceiling'])})",
                "**leaks more than claimed**" if r.get("flagged") else ("—" if r["epsilon"] is None or not views else "no"),
                f"{r['utility']:.3f}", f"{r['seconds']['round']:.1f} ({r['seconds']['aggregation']:.2f})",
                ", ".join(f"{a} {x:.1f}×" for a, x in r["x_chance"].items()),
            ])  # fmt: skip
    return markdown_table(header, rows)


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%"


def coverage_table(summary: dict) -> str:
    """How often an honest run's interval holds the exact ε (simulated statistics, small real runs); Andrew et al.'s
    two-spread fit on the same statistics; what one run's lower bound can show per canary count; the papers in kind."""
    header = ["honest runs", "view", "exact ε (accountant)", "coverage", "below / above", "flagged", "median ε_emp",
              "median width"]  # fmt: skip
    rows = []
    for source, name in (("simulated", "simulated statistics"), ("runs", "real runs through the mechanism")):
        part = summary.get(source)
        if not part:
            continue
        s = part["setting"]
        where = (f"{s['seeds']} {name}: d = {s['dimension']:,}, {s['canaries']} candidates, {s['rounds']} rounds, "
                 f"z = {s['noise_multiplier']:g}")  # fmt: skip
        for view in ("final model", "all iterates"):
            t = part[view]
            rows.append([where, view, f"{_e(part['epsilon_exact'])} ({_e(part['epsilon_accountant'])})",
                         _pct(t["coverage"]), f"{_pct(t['below'])} / {_pct(t['above'])}", _pct(t["flagged"]),
                         _e(t["median"]), _e(t["median_width"])])  # fmt: skip
    two = summary["simulated"]["two spreads"]
    lo, hi = two["interval_90"]
    fit = (f"Andrew et al.'s own fit (two free spreads) on the same simulated all-iterates statistics: median "
           f"{_e(two['median'])}, 90% of runs in [{_e(lo)}, {_e(hi)}], above the accountant's ε in "
           f"{_pct(two['above_accountant'])} of them.")  # fmt: skip
    delta = summary["simulated"]["setting"]["delta"]
    most = [[f"{m:,}", f"{m // 4 * 2:,}", _e(lower_bound_ceiling(m, delta))] for m in CANARY_COUNTS]
    ceilings = markdown_table(["canaries", "guesses", "most the one-run bound can show (every guess right, 95%)"], most)
    return (f"{markdown_table(header, rows)}\n\n{fit}\n\nWhat one run's lower bound can show (δ = {delta:g}): no "
            f"claimed ε above its ceiling can be refuted by it, however broken the mechanism.\n\n{ceilings}\n\n"
            f"The papers, in kind:\n\n{markdown_table(['paper', 'setting', 'reported'], PAPERS)}")
