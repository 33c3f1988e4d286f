"""A grid of experiment variants (e.g. defense strengths) and the privacy–utility trade-off.

Seed 001 §7 (Figure 12) plots attack success against utility normalised to 1.0 without defense.
Each grid point is an ordinary run in its own folder; a point whose ``metrics.json`` exists is
reused, so a sweep can be resumed. The baseline is the same config with no defenses.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable
from pathlib import Path

from leakbed.config import ConfigError, ExperimentConfig, build_config
from leakbed.report import ATTACKER_LABELS, load_runs

BASELINE = "baseline"


def parse_grid(items: list[str]) -> list[tuple[str, list[object]]]:
    """``KEY=v1,v2,...`` per axis; values are TOML (numbers, quoted strings, booleans)."""
    import tomllib

    axes = []
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not raw.strip():
            raise ConfigError(f"--grid {item!r}: expected KEY=v1,v2,...")
        try:
            values = tomllib.loads(f"v = [{raw}]")["v"]
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"--grid {key}: values are not TOML: {err}") from None
        axes.append((key.strip(), values))
    return axes


def _point_name(assignments: list[str]) -> str:
    return re.sub(r"[^A-Za-z0-9_.=,-]+", "_", ",".join(assignments))


def grid_points(base: dict, overrides: list[str], axes: list[tuple[str, list[object]]]) -> dict[str, ExperimentConfig]:
    """Every point of the grid (validated up front, so a bad value fails before any run), plus the baseline."""
    points = {BASELINE: build_config(base, [*overrides, "defenses=[]"])}
    for combo in itertools.product(*[[(k, v) for v in values] for k, values in axes]):
        assignments = [f"{k}={json.dumps(v)}" for k, v in combo]
        points[_point_name(assignments)] = build_config(base, [*overrides, *assignments])
    return points


def run_sweep(points: dict[str, ExperimentConfig], out: Path, run_point: Callable[[ExperimentConfig, Path], None]) -> list[str]:
    """Run every point not already finished; returns the names of the points it ran."""
    ran = []
    for name, cfg in points.items():
        folder = out / name
        if (folder / "metrics.json").exists():
            continue
        run_point(cfg, folder)
        ran.append(name)
    return ran


def tradeoff_rows(points: dict[str, ExperimentConfig], out: Path) -> list[dict]:
    """One row per (point, prior): utility normalised by the baseline's, and each attacker's × chance."""
    base = load_runs(out / BASELINE)
    rows = []
    for name in points:
        for rule, run in load_runs(out / name).items():
            last = str(run["rounds"])
            util = run["utility"][last]["utility"]
            ref = base[rule]["utility"][str(base[rule]["rounds"])]["utility"]
            rows.append(
                {
                    "point": name,
                    "prior": rule,
                    "utility": util,
                    "utility_norm": util / ref if ref else float("nan"),
                    **{f"{a}_x_chance": m["x_chance"] for a, m in run["attackers"].items()},
                    **{f"{a}_ap": m["ap"] for a, m in run["attackers"].items()},
                }
            )
    return rows


def _plot(rows: list[dict], attackers: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    priors = sorted({r["prior"] for r in rows})
    fig, axes = plt.subplots(1, len(priors), figsize=(6 * len(priors), 4.5), squeeze=False)
    for ax, prior in zip(axes[0], priors, strict=True):
        sub = [r for r in rows if r["prior"] == prior]
        for attacker in attackers:
            ax.plot(
                [r["utility_norm"] for r in sub],
                [r[f"{attacker}_x_chance"] for r in sub],
                "o",
                label=ATTACKER_LABELS.get(attacker, attacker),
            )
        for r in sub:
            label = re.sub(r"defenses\.\d+\.", "", r["point"])
            ax.annotate(label, (r["utility_norm"], max(r[f"{a}_x_chance"] for a in attackers)), fontsize=6)
        ax.axhline(1.0, color="grey", lw=0.8, ls=":")
        ax.set_xlim(0.0, max(1.05, 1.05 * max(r["utility_norm"] for r in sub)))
        ax.set_ylim(0.0, None)
        ax.set(
            xlabel="utility (normalised to no defense)",
            ylabel="re-identification AP / chance AP",
            title=f"privacy vs utility, {prior} prior",
        )
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_sweep_report(points: dict[str, ExperimentConfig], out: Path) -> Path:
    """``tradeoff.json``, ``tradeoff.png`` and ``report.md`` with the trade-off table."""
    rows = tradeoff_rows(points, out)
    attackers = list(points[BASELINE].attack.attackers)
    (out / "tradeoff.json").write_text(json.dumps(rows, indent=2))
    _plot(rows, attackers, out / "tradeoff.png")
    header = ["point", "prior", "utility", "utility (norm.)"] + [f"{ATTACKER_LABELS.get(a, a)} AP (× chance)" for a in attackers]
    lines = [
        "# leakbed sweep: privacy vs utility",
        "",
        "Each point is a full run (its own folder and report); utility is normalised by the baseline "
        "(the same config without defenses). Re-identification in the seed's Table 3 form: AP % (× chance).",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for r in rows:
        cells = [r["point"], r["prior"], f"{r['utility']:.3f}", f"{r['utility_norm']:.2f}"]
        cells += [f"{100 * r[f'{a}_ap']:.1f} ({r[f'{a}_x_chance']:.1f}×)" for a in attackers]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "![trade-off](tradeoff.png)", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
