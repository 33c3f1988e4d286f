"""The run report: metrics.json, a Table-3-style markdown table (seed 001 §6.1.1) and plots.

It reads only the per-prior ``metrics.json`` files a run wrote, so any run can be re-reported. The headline table
holds the referee's numbers only: an attack scored by its own plugin scorer is reported apart, in a section of its
own and marked as the plugin's everywhere (``plugin_scored`` in metrics.json). Every text a plugin could have chosen
(its scorer's notes and tables, the attacks' errors, a device's failure reason) crosses ``core.plugin_text`` for
Markdown: it forms no heading, table, link, image or HTML, and a figure is shown only where leakbed wrote the file.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from leakbed.audit_report import audit_section
from leakbed.core.errors import LeakbedError
from leakbed.core.plugin_text import Place, error_line, plugin_text
from leakbed.core.tables import markdown_table
from leakbed.failure_kinds import failure_text, limit_text, share_text
from leakbed.studies.sections import analysis_lines, participant_lines
from leakbed.workers.numbers import SHARES

ATTACKER_LABELS = {"mlp": "MLP", "svm": "SVM", "knn": "kNN"}
METRIC_KEYS = ("ap", "chance_ap", "x_chance", "top1", "top5")


SUMMARY_KEYS = ("users", "rounds", "attackers", "utility", "pool", "rounds_log", "fl_seconds", "attack_fit_seconds")

# counts a scorer may write as floats (``24.0``); an int in metrics.json is a count whatever its name
COUNT_NAMES = frozenset(
    {"updates", "users", "rounds", "count", "images", "pairs", "samples", "observations", "adopters", "devices", "epochs"}
)
COUNT_SUFFIXES = ("_updates", "_users", "_rounds", "_count", "_images", "_pairs", "_missing", "_samples", "_steps")
# the referee's account of an attack's rows, shown apart from its scores
COVERAGE_KEYS = ("coverage", "rows_missing")
MISSING_ROWS = "missing rows scored as a random ranking"
PLUGIN_SCORED = "scored by the plugin's own scorer, in the scoring sandbox"
PLUGIN_SECTION = "Scored by the attacks' own scorers (not the referee's numbers)"
PLUGIN_ABOUT = (
    "Each attack below is scored by its plugin's own scorer, run in the scoring sandbox: these are the plugin's "
    "numbers, not the referee's, and they are in no headline table. Its notes and tables are its own words."
)
# How every table is chosen (its rows, its headline metric, why a plugin's own scorer's numbers are apart): the page
# the report links and the console names
TABLES_PAGE = "docs/explanation/tables.md"
TABLES_LINE = (  # plain text: the report holds no link or code span (tests/leakbed/test_plugin_text_paths.py)
    "How each table is chosen (which rows, which headline metric, why a plugin's own scorer's numbers are apart) and "
    f"in which unit: the page How leakbed's tables are chosen, {TABLES_PAGE} in leakbed's documentation."
)
UNITS = "Shares (AP, chance, top-k, accuracy, AUC, coverage) are in percent in every table and line; metrics.json has fractions."
NO_CLOSED_WORLD = (
    "No closed-world re-identification table: the suite has no closed-world attacker the referee scored "
    "(mlp, svm, knn or a plugin of that family)."
)
SHARE_SUFFIXES = ("_accuracy", "_ap", "_auc")
# an attack's headline metric, the first of these it has, and the key of its chance (the × chance is their ratio)
HEADLINES = {"ap": "chance_ap", "accuracy": "chance", "auc": "chance"}
SCALARS_SHOWN = 4  # metrics of an attack without a headline metric shown in a console cell; the report has them all
ERRORS_SHOWN = 10  # pool errors listed per prior (metrics.json holds them all)
FIGURE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\.png")  # a figure a referee scorer wrote beside metrics.json


class RunFolderError(LeakbedError, ValueError):
    """A run folder the report cannot read (corrupt or partial); its message is one line naming the file."""


class MissingMetrics(RunFolderError):
    """A prior folder without its metrics.json: that prior's run did not finish."""


def load_runs(run_dir: Path) -> dict[str, dict]:
    """Per-prior summaries found under ``run_dir`` (random first, then chrono); a prior folder without
    metrics.json, or one that is not a complete summary, is a RunFolderError rather than a traceback later."""
    runs = {}
    for rule in ("random", "chrono"):
        path = run_dir / rule / "metrics.json"
        if not path.exists():
            if (run_dir / rule).is_dir():
                raise MissingMetrics(f"{run_dir / rule}: prior folder without metrics.json (its run did not finish)")
            continue
        try:
            run = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise RunFolderError(f"{path}: not a readable metrics.json ({str(err).splitlines()[0]})") from None
        missing = [k for k in SUMMARY_KEYS if k not in run] if isinstance(run, dict) else list(SUMMARY_KEYS)
        if missing:
            raise RunFolderError(f"{path}: not a complete prior summary (no {missing[0]!r})")
        runs[rule] = apart(run)
    return runs


def apart(run: dict) -> dict:
    """The prior's summary with every plugin-scored row in ``plugin_scored``, none in ``attackers`` or ``suite`` (a run
    from before they were reported apart kept them there, marked ``scored_by``)."""
    plugin = dict(run.get("plugin_scored") or {})
    for key in ("attackers", "suite"):
        rows = run.get(key) or {}
        plugin |= {n: m for n, m in rows.items() if isinstance(m, dict) and m.get("scored_by") == "plugin"}
        run[key] = {n: m for n, m in rows.items() if n not in plugin}
    run["plugin_scored"] = plugin
    return run


def prior_label(rule: str, run: dict) -> str:
    """``chrono (row order)`` where the data had no timestamps and the experiment opted in to its row order."""
    return f"{rule} (row order)" if rule == "chrono" and run.get("time") == "row order" else rule


def combined_metrics(runs: dict[str, dict]) -> dict[str, dict]:
    """``{"attack_sandbox": {prior: how the attack code was confined}, prior: {attacker: {ap, chance_ap,
    x_chance, top1, top5}}}``: how the attack side ran comes first, then each audited prior's ε estimates; the
    attacks scored by their own plugin scorers are apart, under ``plugin_scored`` (each row ``scored_by: plugin``)."""
    sandbox = {rule: run.get("attack_sandbox", "unknown (a run from before the sandbox)") for rule, run in runs.items()}
    scores = {rule: {name: {k: m.get(k) for k in METRIC_KEYS} for name, m in run["attackers"].items()}
              for rule, run in runs.items()}  # fmt: skip
    audits = {rule: run["audit"] for rule, run in runs.items() if run.get("audit")}
    plugin = {rule: {name: {**{k: v for k, v in m.items() if _number(v)}, "scored_by": "plugin"}
                     for name, m in run.get("plugin_scored", {}).items()}
              for rule, run in runs.items() if run.get("plugin_scored")}  # fmt: skip
    return {"attack_sandbox": sandbox, **({"privacy_audit": audits} if audits else {}), **scores,
            **({"plugin_scored": plugin} if plugin else {})}  # fmt: skip


def sandbox_line(runs: dict[str, dict]) -> str:
    """The report's first line after its title: where the attack code ran; a warning when it was not confined."""
    how = dict.fromkeys(run.get("attack_sandbox", "unknown (a run from before the sandbox)") for run in runs.values())
    text = "; ".join(how)
    return f"**Warning: the attack code ran {text}.**" if "NOT SANDBOXED" in text else f"Attack side: {text}."


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def is_count(key: str, value: object) -> bool:
    """An int, or a float that is a whole number under a count's name (``updates``, ``n_users``, ``rows_missing``)."""
    if not _number(value):
        return False
    if isinstance(value, int):
        return True
    name = key.lower()
    named = name in COUNT_NAMES or name.startswith("n_") or name.endswith(COUNT_SUFFIXES)
    return named and math.isfinite(value) and float(value).is_integer()


def is_share(key: str, value: object) -> bool:
    """A share in [0, 1] under a share's name (``ap``, ``top1``, ``accuracy``, ``label_accuracy``...): printed in
    percent everywhere a person reads it."""
    name = key.lower()
    named = name in SHARES or name.endswith(SHARE_SUFFIXES)
    return named and _number(value) and math.isfinite(value) and 0.0 <= value <= 1.0  # type: ignore[operator]


def format_metric(key: str, value: float) -> str:
    """A scalar metric as the report and the console print it: a count without decimals, a share in percent with one
    (``50.0%``), anything else with three."""
    if is_count(key, value):
        return f"{int(value)}"
    return f"{100 * value:.1f}%" if is_share(key, value) else f"{value:.3f}"


def _percent(share: float) -> str:
    """``75%``; a share just below (above) 1 (0) is never rounded to look complete (empty)."""
    text = f"{100 * share:.0f}"
    if (share < 1 and text == "100") or (share > 0 and text == "0"):
        text = f"{100 * share:.1f}"
    return f"{text}%"


def coverage_text(m: dict) -> str | None:
    """``coverage 100% of 240 updates`` or ``coverage 75% of 240 updates (60 missing rows scored as a random
    ranking)``: the share of the anonymous updates the attack was given that it returned a row for; None when the
    metrics carry no coverage (leakbed's own scorers before it, or no update given)."""
    share, missing = m.get("coverage"), m.get("rows_missing")
    if not _number(share) or not math.isfinite(share):
        return None
    missing = int(missing) if _number(missing) and math.isfinite(missing) else None
    given = next((m[k] for k in ("n_updates", "updates") if is_count(k, m.get(k))), None)
    if share < 1 and missing:
        given = round(missing / (1 - share))  # given = returned + missing, returned = share × given
    text = f"coverage {_percent(share)}" + (f" of {int(given)} updates" if given else "")
    if missing:
        return f"{text} ({missing} {MISSING_ROWS})"
    return f"{text} (the {MISSING_ROWS})" if share < 1 else text


def short_coverage(m: dict) -> str:
    """The coverage as a table cell: ``100%``, ``75% (60 missing)``, ``-`` when unknown."""
    share, missing = m.get("coverage"), m.get("rows_missing")
    if not _number(share) or not math.isfinite(share):
        return "-"
    return _percent(share) + (f" ({int(missing)} missing)" if _number(missing) and missing else "")


def _partial(m: dict | None) -> bool:
    return bool(m) and _number(m.get("coverage")) and m["coverage"] < 1


def table_footnote(runs: dict[str, dict]) -> str:
    """The closed-world table's footnote when an attacker returned no row for some of its updates (its AP cells
    carry a ``*``); '' when every attacker covered all of them."""
    partial = [
        f"{ATTACKER_LABELS.get(name, name)} ({prior_label(rule, run)}) {coverage_text(m)}"
        for rule, run in runs.items()
        for name, m in run["attackers"].items()
        if _partial(m)
    ]
    if not partial:
        return ""
    return "* returned no row for some of the updates it was given: " + "; ".join(partial) + "."


def table_rows(runs: dict[str, dict]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the Table-3 form: AP (× chance), top-1, top-5 per prior, in percent, and the Chance row; no
    rows when the suite had no closed-world attacker. An attacker's AP cell carries a ``*`` where it returned no row
    for some updates (``table_footnote`` says how many)."""
    header = ["attacker"]
    for rule, run in runs.items():
        label = prior_label(rule, run)
        header += [f"{label} AP", f"{label} top-1", f"{label} top-5"]
    names = list(dict.fromkeys(n for run in runs.values() for n in run["attackers"]))
    if not names:
        return header, []  # no attacker: no table (a Chance row alone says nothing)
    rows = []
    for name in names:
        row = [ATTACKER_LABELS.get(name, name)]
        for run in runs.values():
            m = run["attackers"].get(name)
            mark = "*" if _partial(m) else ""
            row += (
                [f"{_pct(m, 'ap')} ({_num(m, 'x_chance', '.0f')}×){mark}", _pct(m, "top1"), _pct(m, "top5")]
                if m
                else ["-"] * 3
            )
        rows.append(row)
    chance = ["Chance"]
    for run in runs.values():
        any_m = next(iter(run["attackers"].values()), None)
        u = run["users"]
        chance += [f"{_pct(any_m, 'chance_ap')} (1×)" if any_m else "-", f"{100 / u:.1f}", f"{100 * min(5, u) / u:.1f}"]
    rows.append(chance)
    return header, rows


def _num(m: dict, key: str, spec: str = ".3f", scale: float = 1.0) -> str:
    """A metric as a cell, ``-`` where it is missing or not a finite number."""
    v = m.get(key)
    return format(scale * v, spec) if _number(v) and math.isfinite(v) else "-"


def _pct(m: dict, key: str) -> str:
    return _num(m, key, ".1f", 100.0)


def _pct_sign(m: dict, key: str) -> str:
    """A share as a percentage in a line of text (``50.0%``; ``-`` where missing)."""
    cell = _pct(m, key)
    return cell if cell == "-" else f"{cell}%"


def _plot(runs: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for rule, run in runs.items():
        style = "-" if rule == "random" else "--"
        for name, m in run["attackers"].items():
            rounds = sorted(int(r) for r in m.get("per_round", {}))
            top1 = [100 * m["per_round"][str(r)]["top1"] for r in rounds]
            axes[0].plot(rounds, top1, style, marker=".", label=f"{ATTACKER_LABELS.get(name, name)} ({rule})")
        util = run["utility"]
        rounds = sorted(int(r) for r in util)
        axes[1].plot(rounds, [util[str(r)]["utility"] for r in rounds], style, label=rule)
    users = next(iter(runs.values()))["users"]
    axes[0].axhline(100 / users, color="grey", lw=0.8, ls=":", label="chance (1/U)")
    # per-round AP is not plotted: a round holds one update per sampled user, so its chance AP is
    # H_n / n and AP / chance cannot exceed a few; top-1 has a fixed chance of 1/U.
    axes[0].set(
        xlabel="FL round of the anonymous update", ylabel="top-1 re-identification (%)", title="Re-identification by round"
    )
    axes[1].set(xlabel="FL round", ylabel="utility", title="Global model utility")
    axes[0].legend(fontsize=7)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def defense_params(entry: dict) -> str:
    """A defenses entry's own parameters as the report names them: `` (variance 0.5)``, or '' for none."""
    params = {k: v for k, v in entry.items() if k not in ("name", "fraction", "users")}
    number = lambda v: isinstance(v, int | float) and not isinstance(v, bool)  # noqa: E731
    shown = ", ".join(f"{k} {v:g}" if number(v) else f"{k} {v}" for k, v in params.items())
    return f" ({shown})" if shown else ""


def _defense_lines(run: dict) -> list[str]:
    """Protection for defending and non-defending users apart (each ranked among its own updates)."""
    if not run.get("defenses"):
        return []
    names = ", ".join(f"{d['name']}{defense_params(d)} ({d['fraction']:.0%} of users)" for d in run["defenses"])
    lines = [f"- defenses: {names}; {run['defending_users']} of {run['users']} users defend"]
    for attacker, m in run["attackers"].items():
        parts = [
            f"{g}: AP {_pct_sign(gm, 'ap')} ({_num(gm, 'x_chance', '.1f')}×), top-1 {_pct_sign(gm, 'top1')}"
            for g, gm in m.get("groups", {}).items()
            if gm["n_updates"]
        ]
        lines.append(f"  - {ATTACKER_LABELS.get(attacker, attacker)}: " + "; ".join(parts))
    return lines


def _privacy_lines(run: dict) -> list[str]:
    """The DP defenses' (ε, δ), noise and clip, and what shuffler batching held back."""
    lines = []
    for p in run.get("privacy", []):
        eps = "no finite ε" if p["epsilon"] is None else f"ε = {p['epsilon']:.3g}"
        if p.get("epsilon_exact") is not None:
            eps += f" (exact {p['epsilon_exact']:.3g})"
        extra = f" ({plugin_text(p['note'], 'markdown')})" if p.get("note") else ""  # a defense plugin's words
        if p.get("averaged_per_round"):  # the noise the server's wrapper adds to the average of the replies it releases
            extra += f"; noise std {p['noise_std_on_average']:.3g} on the average of {p['averaged_per_round']} replies"
        lines.append(
            f"- {p['defense']}: {eps} at δ = {p['delta']:g}, noise multiplier {p['noise_multiplier']:g}, "
            f"clip {p['clip']:g}, {p['adopters']} adopters; {p['accountant']}{extra}"
        )
    b = run.get("shuffler", {})
    if b.get("batch_min"):
        lines.append(
            f"- shuffler batching k = {b['batch_min']}: {b['released']} of {b['held']} updates released in "
            f"{len(b['batches'])} batches (rounds {b['release_rounds']}), {b['withheld']} withheld; "
            f"up to {b['max_delay_rounds']} rounds late"
        )
    return lines


def scalar_text(m: dict, markdown: bool = False) -> str:
    """An attack's scalar metrics, ``accuracy 0.500, chance 0.100, updates 24``; its coverage is shown apart. A plugin's
    scorer names its own metrics: ``markdown`` escapes the names."""
    name = (lambda k: plugin_text(k, "markdown", 64)) if markdown else str  # noqa: E731
    return ", ".join(f"{name(k)} {format_metric(k, v)}" for k, v in m.items() if _number(v) and k not in COVERAGE_KEYS)


def _provenance_lines(m: dict) -> list[str]:
    """Coverage, who scored it, and a scorer's failure, each on a line of its own."""
    lines = [f"- {text}" for text in [coverage_text(m)] if text]
    if m.get("scored_by") == "plugin":
        lines.append(f"- {PLUGIN_SCORED}")
    if m.get("scorer_failed"):
        lines.append(f"- no score: {error_line(m['scorer_failed'], 'markdown', own='')}")
    return lines


def _tables(m: dict) -> list[str]:
    """A result's tables, every title and cell escaped (a table of the referee's may hold names an attack chose)."""
    lines = []
    tables = m.get("tables")
    for title, table in (tables if isinstance(tables, dict) else {}).items():
        if not isinstance(table, dict):
            continue
        rows = [[plugin_text(c, "markdown", 200) for c in r] for r in table.get("rows", []) if isinstance(r, list)]
        header = [plugin_text(h, "markdown", 200) for h in table.get("header", [])]
        lines += ["", plugin_text(title, "markdown"), "", markdown_table(header, rows)]
    return lines


def _figures(run_dir: Path, rule: str, name: str, m: dict) -> list[str]:
    """A referee scorer's figures that leakbed wrote beside the prior's metrics.json: local files, by a plain name;
    anything else is not shown (a report loads nothing from elsewhere)."""
    figures = m.get("figures") if m.get("scored_by") != "plugin" else None
    shown = [f for f in figures or [] if isinstance(f, str) and FIGURE.fullmatch(f) and (run_dir / rule / f).is_file()]
    return [f"\n![{plugin_text(name, 'markdown', 64)}]({rule}/{fig})" for fig in shown]


def _suite_lines(run_dir: Path, rule: str, run: dict) -> list[str]:
    """The further attacks of the suite, as the referee scored them: their scalar metrics, tables and figures. Every
    note and table cell is escaped: an attack's declared notes are its own words."""
    lines = []
    for name, m in run.get("suite", {}).items():
        scalars = scalar_text(m)
        notes = [f"- {plugin_text(n, 'markdown', 600)}" for n in m.get("notes", [])]
        lines += [f"#### {name} ({rule} prior)", "", *([f"- {scalars}"] if scalars else []), *_provenance_lines(m), *notes]
        lines += [*_tables(m), *_figures(run_dir, rule, name, m)]
        lines.append("")
    return lines


def _plugin_lines(rule: str, run: dict) -> list[str]:
    """The attacks scored by their own plugin scorers: each marked as such, its numbers, notes and tables shown as the
    plugin's (escaped), its exports listed under its own name."""
    lines = []
    for name, m in run.get("plugin_scored", {}).items():
        scalars = scalar_text(m, markdown=True)
        notes = [f"- the plugin's scorer notes: {plugin_text(n, 'markdown')}" for n in m.get("notes", [])]
        exports = m.get("exports") if isinstance(m.get("exports"), dict) else {}
        shown = [f"{name}/{plugin_text(e, 'markdown', 64)}: {scalar_text(v, markdown=True)}" for e, v in exports.items()
                 if isinstance(v, dict)]  # fmt: skip
        lines += [f"#### {name} ({rule} prior), scored by its plugin", "", f"- {PLUGIN_SCORED}: its numbers, not the referee's",
                  *([f"- {scalars}"] if scalars else []), *_provenance_lines({k: v for k, v in m.items() if k != "scored_by"}),
                  *notes, *(f"- its export {e}" for e in shown), *_tables(m), ""]  # fmt: skip
    return lines


def _attacker_lines(run: dict) -> list[str]:
    """Each closed-world attacker's scores beside its coverage, where the referee reported one."""
    lines = []
    for name, m in run["attackers"].items():
        if not any(k in m for k in ("coverage", "scored_by")):
            continue  # a run from before the referee counted rows
        about = coverage_text(m)
        lines.append(
            f"- {ATTACKER_LABELS.get(name, name)}: AP {_pct_sign(m, 'ap')} ({_num(m, 'x_chance', '.1f')}×), "
            f"top-1 {_pct_sign(m, 'top1')}, top-5 {_pct_sign(m, 'top5')}" + (f"; {about}" if about else "")
        )
    return lines


def _failure_line(name: str, why: str, pool: dict) -> str:
    """Why an attacker has no result, with its own last error from the pool (the pool's list may show others first)."""
    own = [e for e in pool.get("errors", []) if f"'{name}'" in e]
    last = f"; its last error: {error_line(own[-1], 'markdown', own='')}" if own else ""
    return f"- attacker {plugin_text(name, 'markdown', 80)} has no result: {error_line(why, 'markdown', own='')}{last}"


def _error_lines(rule: str, pool: dict) -> list[str]:
    """The pool's errors, each labelled with who wrote it (the first ``ERRORS_SHOWN``)."""
    errors = pool.get("errors", [])
    if not errors:
        return []
    lines = [f"- attack pool errors ({len(errors)}):", *[f"  - {error_line(e, 'markdown')}" for e in errors[:ERRORS_SHOWN]]]
    if len(errors) > ERRORS_SHOWN:
        lines.append(f"  - … {len(errors) - ERRORS_SHOWN} more in {rule}/metrics.json (pool.errors)")
    return lines


def headline(m: dict) -> tuple[str, str] | None:
    """An attack's headline metric and the key of its chance: the first of AP, accuracy, AUC it has (``HEADLINES``);
    None when it has none (its metrics are then shown as they are, beside no chance)."""
    return next(((k, c) for k, c in HEADLINES.items() if _number(m.get(k)) and math.isfinite(m[k])), None)


def _score_cells(m: dict) -> tuple[str, str]:
    """The score and chance cells of an attack's row: its headline metric, and that metric's own chance with the
    ratio of the two (``25.0% (2.0×)``); without a headline metric, its first metrics and ``-`` for the chance (no
    × chance is taken from another key). A plugin's scorer names its own metrics: console-escaped."""
    if m.get("scorer_failed"):
        return "no score: " + error_line(m["scorer_failed"], "console", own=""), "-"
    found = headline(m)
    if found is None:
        scalars = [(k, v) for k, v in m.items() if _number(v) and k not in COVERAGE_KEYS and k != "x_chance"]
        shown = [f"{plugin_text(k, 'console', 64)} {format_metric(k, v)}" for k, v in scalars[:SCALARS_SHOWN]]
        more = f" (+{len(scalars) - SCALARS_SHOWN} in the report)" if len(scalars) > SCALARS_SHOWN else ""
        return ", ".join(shown) + more or "-", "-"
    key, chance_key = found
    score = f"{key.upper() if key != 'accuracy' else key} {format_metric(key, m[key])}"
    chance = m.get(chance_key)
    if not _number(chance) or not math.isfinite(chance):
        return score, "-"
    ratio = f" ({m[key] / chance:.1f}×)" if chance > 0 else ""
    return score, format_metric(chance_key, chance) + ratio


def _rows(runs: dict[str, dict], key: str, label: str = "") -> list[list[str]]:
    rows = []
    for rule, run in runs.items():
        for name, m in apart(dict(run)).get(key, {}).items():  # a plugin-scored row only ever among its own
            score, chance = _score_cells(m)
            rows.append([prior_label(rule, run), name + label, score, chance, short_coverage(m)])
    return rows


OTHER_HEADER = ["prior", "attack", "headline metric", "its chance (× chance)", "coverage"]


def other_attack_rows(runs: dict[str, dict]) -> tuple[list[str], list[list[str]]]:
    """The console's "Other attacks" table: one row per (prior, attack) of the suite (every attack the referee scored
    outside the closed-world table) with its headline metrics, chance, and coverage. No rows when the suite had none."""
    return list(OTHER_HEADER), _rows(runs, "suite")


def plugin_rows(runs: dict[str, dict]) -> tuple[list[str], list[list[str]]]:
    """The console's table of the attacks scored by their own plugin scorers, each marked ``(plugin-scored)``: their
    numbers, not the referee's, in a table of their own."""
    return list(OTHER_HEADER), _rows(runs, "plugin_scored", " (plugin-scored)")


def written_line(run_dir: Path, runs: dict[str, dict]) -> str:
    """Where a run's numbers are: each prior's metrics.json (every attack's metrics) and outputs. The report's path is
    the command's last line (said once)."""
    metrics = ", ".join(str(run_dir / rule / "metrics.json") for rule in runs)
    outputs = ", ".join(f"{run_dir / rule / 'outputs'}/" for rule in runs)
    return f"metrics: {metrics}; outputs: {outputs}"


def _attack_side_lines(run: dict) -> list[str]:
    """What the attack side received, and how it was kept from the truth."""
    side = run.get("attack_side")
    if not side:
        return []
    got = side["received"]
    return [
        f"- attack side: {run.get('attack_sandbox', 'unknown')}; it received per update: {', '.join(got['update'])}; per round: "
        f"{', '.join(got['round'])}; once: {', '.join(got['once'])}"
    ]


def replaced_text(replies: dict) -> str:
    """``; 2 ClientApp actors died and were replaced (...)`` where the simulation replaced dead actors, else ''."""
    n = replies.get("actors_replaced")
    if not _number(n) or n < 1:
        return ""
    were = "actor died and was" if n == 1 else "actors died and were"
    return f"; {int(n)} ClientApp {were} replaced by a new one (the message each held failed, counted above)"


def replies_line(rule: str, replies: dict, place: Place = "markdown") -> str:
    """One prior's replies in one line: how many failed or were rejected, grouped by kind (``failure_kinds``: a
    device's words, escaped for ``place``, the report's Markdown or the console), the ClientApp actors replaced,
    how many users the numbers rest on. On the console it is plain text (no Markdown)."""
    bad = replies["failed"] + replies["rejected"]
    reasons = failure_text(replies.get("why", {}), lambda kind: plugin_text(kind, place, 160))
    text = (f"{rule} prior: {bad} of {replies['sampled']} sampled devices' replies failed or were rejected "
            f"({share_text(replies['failed_share'])}){': ' + reasons if reasons else ''}{replaced_text(replies)}; the "
            f"numbers rest on {replies['users_in_updates']} of {replies['users']} users")  # fmt: skip
    if replies.get("too_many_failed"):
        text = f"Warning: {text}, more than fl.max_failed_share {limit_text(replies['max_failed_share'])} allows."
        return f"**{text}**" if place == "markdown" else text
    return f"Replies: {text}."


def replies_lines(runs: dict[str, dict]) -> list[str]:
    """What every report states first after the sandbox line: each prior's failed replies (runs before this was
    recorded say nothing)."""
    lines = [replies_line(rule, run["replies"]) for rule, run in runs.items() if run.get("replies")]
    return [*lines, ""] if lines else []


def write_report(run_dir: Path) -> Path:
    """Write ``metrics.json``, ``report.md`` and ``reid_by_round.png`` into ``run_dir``."""
    runs = load_runs(run_dir)
    if not runs:
        raise RunFolderError(f"no per-prior metrics.json under {run_dir}")
    (run_dir / "metrics.json").write_text(json.dumps(combined_metrics(runs), indent=2))
    _plot(runs, run_dir / "reid_by_round.png")
    header, rows = table_rows(runs)
    first = next(iter(runs.values()))
    lines = [
        "# leakbed report",
        "",
        sandbox_line(runs),
        "",
        *replies_lines(runs),
        f"Closed-world re-identification of anonymous updates (seed 001 §6.1.1, Table 3 form), "
        f"{first['users']} users, {first['rounds']} FL rounds. AP is the mean over users of the "
        "per-user average precision, in percent, with its multiple of chance AP; top-1/top-5 are accuracies in percent. "
        "Chance AP is the expected AP of a random ranking on the same test updates (it tends to 1/U, the seed's "
        "approximation, as test updates per user grow).",
        f"Update representation: {', '.join(first['attack_layers'])} (Δw flattened, L2-normalised). {UNITS}",
        TABLES_LINE,
        "",
        markdown_table(header, rows) if rows else NO_CLOSED_WORLD,
        *(["", f"\\{note}"] if (note := table_footnote(runs)) else []),  # escaped: "* ..." would be a bullet
        "",
        *audit_section(runs),
        "## Per prior",
        "",
    ]
    for rule, run in runs.items():
        final = run["utility"][max(run["utility"], key=int)]
        pool = run["pool"]
        failed = sum(r["failed"] for r in run["rounds_log"].values())
        rejected = sum(r["rejected"] for r in run["rounds_log"].values())
        lines += [
            f"### {prior_label(rule, run)} prior",
            "",
            f"- final utility: {final['utility']:.3f}; FL wall time {run['fl_seconds']:.1f} s; "
            f"attack fitting {run['attack_fit_seconds']:.1f} s",
            f"- attack pool: tapped {pool['tapped']}, analysed {pool['analysed']}, dropped {pool['dropped']}, "
            f"failed {pool['failed']}; max lag {pool['max_lag_rounds']} rounds; errors {len(pool['errors'])}; "
            f"worker restarts {pool.get('worker_restarts', 0)}, redeliveries {pool.get('retries', 0)}, "
            f"duplicates filed once {pool.get('duplicates', 0)}",
            *_error_lines(rule, pool),
            f"- failed replies {failed}, rejected {rejected}",
            *_attacker_lines(run),
            *_attack_side_lines(run),
            *_defense_lines(run),
            *_privacy_lines(run),
            *[_failure_line(n, why, pool) for n, why in run.get("attackers_failed", {}).items()],
            "",
        ]
    lines += ["![re-identification by round](reid_by_round.png)", ""]
    suite = [line for rule, run in runs.items() for line in _suite_lines(run_dir, rule, run)]
    if suite:
        lines += ["## Further attacks", "", *suite]
    plugin = [line for rule, run in runs.items() for line in _plugin_lines(rule, run)]
    if plugin:
        lines += [f"## {PLUGIN_SECTION}", "", PLUGIN_ABOUT, "", *plugin]
    participant = [line for rule, run in runs.items() for line in participant_lines(rule, run)]
    if participant:
        lines += ["## Participant attacks", "", "Attacks by adversarial devices, not by the server.", "", *participant]
    analyses = analysis_lines(run_dir)
    if analyses:
        lines += ["## Analyses", "", *analyses]
    path = run_dir / "report.md"
    path.write_text("\n".join(lines))
    return path
