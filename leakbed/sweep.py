"""A grid of experiment variants (e.g. defense strengths) and the privacy–utility trade-off.

Seed 001 §7 (Figure 12) plots attack success against utility normalised to 1.0 without defense.
Each grid point is an ordinary run in its own folder; a point whose ``metrics.json`` exists is
reused, so a sweep can be resumed. The baseline is the same config with no defenses (and no
shuffler batching). Several grids (one per defense, each a product of its axes) can share one
sweep and one report: give them on the command line or in a sweep file (``[sweep]`` table with
``config``, ``set`` and ``[[sweep.grid]]`` entries of ``label``, ``set`` and ``axes``).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leakbed.audit_report import plot_epsilon, sweep_audit_cells
from leakbed.core.config import ConfigError, ExperimentConfig, build_config, read_tree
from leakbed.core.declaration import plugin_scored, reid_names
from leakbed.core.tables import markdown_table
from leakbed.defenses.registry import params_of
from leakbed.package_data import config_file
from leakbed.preflight import declarations
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


@dataclass(frozen=True)
class Grid:
    """One grid: overrides shared by its points (e.g. which defense) and the axes it varies."""

    axes: list[tuple[str, list[object]]]
    label: str = ""
    overrides: list[str] = field(default_factory=list)


def _point_name(assignments: list[str]) -> str:
    return re.sub(r"[^A-Za-z0-9_.=,-]+", "_", ",".join(assignments))


def _short(key: str, keys: list[str]) -> str:
    """The last part of a key (``defenses.0.strength`` -> ``strength``) when that is unambiguous."""
    last = key.rsplit(".", 1)[-1]
    return last if sum(k.rsplit(".", 1)[-1] == last for k in keys) == 1 else key


def grid_points(
    base: dict, overrides: list[str], axes: list[tuple[str, list[object]]] | None = None, grids: list[Grid] | None = None
) -> dict[str, ExperimentConfig]:
    """Every point of every grid (validated up front, so a bad value fails before any run), plus the baseline.

    A point of an unlabelled grid is named by its assignments; a labelled grid's point by the label
    and the short assignments (``bkg-repl.strength=0.25``)."""
    points = {BASELINE: build_config(base, [*overrides, "defenses=[]", "shuffler.batch_min=0"])}
    all_grids = ([Grid(axes)] if axes else []) + list(grids or [])
    for grid in all_grids:
        keys = [k for k, _ in grid.axes]
        for combo in itertools.product(*[[(k, v) for v in values] for k, values in grid.axes]):
            assignments = [f"{k}={json.dumps(v)}" for k, v in combo]
            name = _point_name(assignments)
            if grid.label:
                name = _point_name([grid.label + "." + ",".join(f"{_short(k, keys)}={json.dumps(v)}" for k, v in combo)])
            if name in points:
                raise ConfigError(f"sweep: two grid points are both named {name!r}; give the grids distinct labels")
            try:
                points[name] = build_config(base, [*overrides, *grid.overrides, *assignments])
            except ConfigError as err:
                raise ConfigError(f"{grid.label + ': ' if grid.label else ''}{err}") from None
    return points


def _grid_of(index: int, raw: Any) -> Grid:
    where = f"sweep.grid.{index}"
    if not isinstance(raw, dict) or set(raw) - {"label", "set", "axes"}:
        raise ConfigError(f"{where}: expected a table with label, set and axes only")
    label, sets, axes = raw.get("label", ""), raw.get("set", []), raw.get("axes", {})
    if not isinstance(label, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", label):
        raise ConfigError(f"{where}.label: 1-64 letters, digits, '_', '.', '-' (got {label!r})")
    if not isinstance(sets, list) or not all(isinstance(x, str) for x in sets):
        raise ConfigError(f"{where}.set: a list of KEY=VALUE strings")
    if not isinstance(axes, dict) or not axes or not all(isinstance(v, list) and v for v in axes.values()):
        raise ConfigError(f"{where}.axes: a table of KEY = [values] with at least one value each")
    return Grid([(str(k), list(v)) for k, v in axes.items()], label, list(sets))


def read_sweep_file(path: str | Path) -> tuple[dict, list[str], list[Grid]]:
    """A sweep file: ``[sweep]`` with ``config`` (experiment TOML, relative to this file; else a built-in config's
    name, so a copy of a built-in sweep, ``leakbed init``, still finds its base), ``set`` and ``[[sweep.grid]]``;
    returns the base experiment tree, its overrides and the grids."""
    tree = read_tree(path)
    sweep = tree.get("sweep")
    if not isinstance(sweep, dict) or set(tree) != {"sweep"}:
        raise ConfigError(f"{path}: a sweep file holds one [sweep] table")
    unknown = set(sweep) - {"config", "set", "grid"}
    if unknown:
        raise ConfigError(f"{path}: unknown sweep key {sorted(unknown)[0]!r} (config, set, grid)")
    config = sweep.get("config", "")
    beside = Path(path).parent / config
    base = read_tree(beside if beside.exists() else config_file(config)) if config else {}
    sets = sweep.get("set", [])
    if not isinstance(sets, list) or not all(isinstance(x, str) for x in sets):
        raise ConfigError(f"{path}: sweep.set is a list of KEY=VALUE strings")
    grids = [_grid_of(i, g) for i, g in enumerate(sweep.get("grid", []))]
    if not grids:
        raise ConfigError(f"{path}: no [[sweep.grid]] given")
    return base, sets, grids


def is_sweep_file(path: str | Path | None) -> bool:
    return path is not None and "sweep" in read_tree(path)


def sweep_spec(points: dict[str, ExperimentConfig]) -> dict[str, str]:
    """Each point's name and a digest of its frozen config: what identifies a finished point on resume.

    The Ray cluster a point runs on (``simulation.ray_address``) is where, not what: a seeded run
    gives the same numbers on any cluster, so a sweep started locally may be resumed on one.
    """
    import hashlib

    where = {"simulation": {"ray_address"}}
    return {name: hashlib.sha256(cfg.model_dump_json(exclude=where).encode()).hexdigest()[:16] for name, cfg in points.items()}


def extends(saved: object, spec: dict[str, str]) -> bool:
    """A sweep folder may be resumed or extended (new grids) but never mixed: every point it already
    holds must be in the new sweep with the very same config."""
    return isinstance(saved, dict) and all(spec.get(name) == digest for name, digest in saved.items())


def run_sweep(points: dict[str, ExperimentConfig], out: Path, run_point: Callable[[ExperimentConfig, Path], None]) -> list[str]:
    """Run every point not already finished (a point left unfinished, e.g. interrupted, starts again from scratch:
    its seeded run gives the same numbers); returns the names of the points it ran."""
    ran = []
    for name, cfg in points.items():
        folder = out / name
        if (folder / "metrics.json").exists():
            continue
        if folder.exists():  # written by leakbed alone (a run folder holds nothing a sandbox wrote): no link to follow
            shutil.rmtree(folder)
        run_point(cfg, folder)
        ran.append(name)
    return ran


def defense_label(cfg: ExperimentConfig) -> str:
    """What a point defends with (its curve in the plot): defense names, ``batching``, or ``none``."""
    batching = "batching" + ("-nearest" if cfg.shuffler.reference == "nearest" else "")
    parts = [d.name for d in cfg.defenses] + ([batching] if cfg.shuffler.batch_min else [])
    return "+".join(parts) or "none"


def _epsilon(run: dict) -> float | None:
    eps = [p["epsilon"] for p in run.get("privacy", []) if p.get("epsilon") is not None]
    return max(eps) if eps else None


def _exact(run: dict) -> float | None:
    eps = [p["epsilon_exact"] for p in run.get("privacy", []) if p.get("epsilon_exact") is not None]
    return max(eps) if eps else None


def _audited(run: dict, key: str) -> object:
    """The audit's all-iterates ``key`` (``epsilon_emp``, ``interval``, ``epsilon_lower_bound``, ``lower_bound_ceiling``,
    ``above_accountant``, ``inserted``, ``held_out``): the view the accountant's ε is about (every released round), or
    None without an audit."""
    est = run.get("audit", {}).get("all iterates")
    return est[key] if est else None


def _noise(cfg: ExperimentConfig) -> float | None:
    z = [float(params_of(d).noise_multiplier) for d in cfg.defenses if hasattr(params_of(d), "noise_multiplier")]
    return max(z) if z else None


def tradeoff_rows(points: dict[str, ExperimentConfig], out: Path) -> list[dict]:
    """One row per (point, prior): utility normalised by the baseline's, each attacker's × chance, ε if DP."""
    base = load_runs(out / BASELINE)
    nan = float("nan")
    rows = []
    for name, cfg in points.items():
        decls = declarations(cfg)
        attackers = reid_names(decls, cfg.attack.suite)  # the referee's: a plugin-scored attack is in no sweep table
        others = [s for s in cfg.attack.suite if s not in attackers and s not in plugin_scored(decls, cfg.attack.suite)]
        for rule, run in load_runs(out / name).items():
            last = str(run["rounds"])
            util = run["utility"][last]["utility"]
            ref = base[rule]["utility"][str(base[rule]["rounds"])]["utility"]
            rows.append(
                {
                    "point": name,
                    "defense": defense_label(cfg),
                    "prior": rule,
                    "utility": util,
                    "utility_norm": util / ref if ref else float("nan"),
                    "epsilon": _epsilon(run),
                    "epsilon_exact": _exact(run),
                    "noise_multiplier": _noise(cfg),
                    # the privacy audit's all-iterates view (what the accountant's ε is about), and its flag
                    "epsilon_emp": _audited(run, "epsilon_emp"),
                    "epsilon_emp_interval": _audited(run, "interval"),
                    "epsilon_lower_bound": _audited(run, "epsilon_lower_bound"),
                    "lower_bound_ceiling": _audited(run, "lower_bound_ceiling"),
                    "canaries_in_out": [_audited(run, "inserted"), _audited(run, "held_out")],
                    "audit_flagged": run.get("audit", {}).get("flagged"),
                    "failed_replies": sum(r["failed"] + r["rejected"] for r in run["rounds_log"].values()),
                    "released": run.get("shuffler", {}).get("released"),
                    "withheld": run.get("shuffler", {}).get("withheld"),
                    # an attacker whose fit failed (e.g. a diverged global model) has NaN here
                    **{f"{a}_x_chance": run["attackers"].get(a, {}).get("x_chance", nan) for a in attackers},
                    **{f"{a}_ap": run["attackers"].get(a, {}).get("ap", nan) for a in attackers},
                    # other attacks scored as × chance (metadata, linkage, ...): their effect beside the weights'
                    **{f"suite:{s}_x_chance": run.get("suite", {}).get(s, {}).get("x_chance", nan) for s in others},
                }
            )
    return rows


def _plot(rows: list[dict], attackers: list[str], path: Path) -> None:
    """Seed 001 Figure 12: per prior and attacker, one curve per defense from the undefended point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    priors = list(dict.fromkeys(r["prior"] for r in rows))
    fig, axes = plt.subplots(len(priors), len(attackers), figsize=(5 * len(attackers), 4.2 * len(priors)), squeeze=False)
    for i, prior in enumerate(priors):
        sub = [r for r in rows if r["prior"] == prior]
        base = next((r for r in sub if r["point"] == BASELINE), None)
        labels = list(dict.fromkeys(r["defense"] for r in sub if r["point"] != BASELINE))
        for j, attacker in enumerate(attackers):
            ax = axes[i][j]
            key = f"{attacker}_x_chance"
            for n, label in enumerate(labels):
                curve = ([base] if base else []) + [r for r in sub if r["defense"] == label and r["point"] != BASELINE]
                ax.plot(
                    [r["utility_norm"] for r in curve],
                    [r[key] for r in curve],
                    marker="osD^v<>ph*"[n % 10],
                    ms=4,
                    lw=1,
                    label=label,
                )
            if base:
                ax.plot([1.0], [base[key]], "k*", ms=10, label="no defense")
            ax.axhline(1.0, color="grey", lw=0.8, ls=":")
            ax.set_xlim(0.0, max(1.05, 1.05 * max(r["utility_norm"] for r in sub)))
            ax.set_ylim(0.0, None)
            ax.set(
                xlabel="utility (normalised to no defense)",
                ylabel="re-identification AP / chance AP",
                title=f"{ATTACKER_LABELS.get(attacker, attacker)}, {prior} prior",
            )
            ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def write_sweep_report(points: dict[str, ExperimentConfig], out: Path) -> Path:
    """``tradeoff.json``, ``tradeoff.png`` and ``report.md`` with the trade-off table."""
    rows = tradeoff_rows(points, out)
    attackers = reid_names(declarations(points[BASELINE]), points[BASELINE].attack.suite)
    (out / "tradeoff.json").write_text(json.dumps(rows, indent=2))
    _plot(rows, attackers, out / "tradeoff.png")
    audited = any(r["epsilon_emp"] is not None for r in rows)
    header = ["point", "defense", "prior", "utility", "utility (norm.)", "ε"]
    header += ["z", "ε exact", "ε_emp [90%]", "canaries in / out", "lower bound (most)", "flag"] if audited else []
    header += [f"{ATTACKER_LABELS.get(a, a)} AP (× chance)" for a in attackers]
    suite = [k.removeprefix("suite:").removesuffix("_x_chance") for k in rows[0] if k.startswith("suite:")] if rows else []
    header += [f"{s} × chance" for s in suite]
    lines = [
        "# leakbed sweep: privacy vs utility",
        "",
        "Each point is a full run (its own folder and report); utility is normalised by the baseline "
        "(the same config without defenses). Re-identification in the seed's Table 3 form: AP % (× chance). "
        "ε: the (ε, δ) spent by a DP defense over the run (δ in its run's metrics.json), - where none applies. "
        "Where the points were audited (audit.canaries): ε exact is the mechanism's ε by the PLD accountant, ε_emp the "
        "canaries' estimate from all iterates with its 90% interval, the lower bound Steinke et al.'s one-run bound "
        "beside the most the canaries can show, and the flag marks an interval wholly above ε (the run leaks more than "
        "its DP claims); each run's report has every view.",
        "",
    ]
    cells = []
    for r in rows:
        eps = "-" if r["epsilon"] is None else f"{r['epsilon']:.3g}"
        row = [r["point"], r["defense"], r["prior"], f"{r['utility']:.3f}", f"{r['utility_norm']:.2f}", eps]
        if audited:
            row += [_cell(r["noise_multiplier"]), _cell(r["epsilon_exact"]), *sweep_audit_cells(r)]
        row += [
            "fit failed" if math.isnan(r[f"{a}_ap"]) else f"{100 * r[f'{a}_ap']:.1f} ({r[f'{a}_x_chance']:.1f}×)"
            for a in attackers
        ]
        row += [f"{r.get(f'suite:{s}_x_chance', float('nan')):.2f}" for s in suite]
        cells.append(row)
    lines.append(markdown_table(header, cells))
    broken = [r for r in rows if r["failed_replies"]]
    if broken:
        lines += ["", "Points with failed or rejected device replies (their numbers are not comparable; re-run them):"]
        lines += [f"- {r['point']} ({r['prior']}): {r['failed_replies']} replies lost" for r in broken]
    batched = [r for r in rows if r["withheld"]]
    if batched:
        lines += ["", "Shuffler batching withholds the last updates that never fill a batch: "]
        lines += [f"- {r['point']} ({r['prior']}): {r['released']} released, {r['withheld']} withheld" for r in batched]
    lines += ["", "![trade-off](tradeoff.png)", ""]
    if plot_epsilon(rows, out / "epsilon.png"):
        lines += ["![privacy spent: the accountant's ε and the audit's](epsilon.png)", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
