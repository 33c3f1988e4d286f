"""The run report: metrics.json, a Table-3-style markdown table (seed 001 §6.1.1) and plots.

It reads only the per-prior ``metrics.json`` files a run wrote, so any run can be re-reported.
"""

from __future__ import annotations

import json
from pathlib import Path

from studies.sections import analysis_lines, participant_lines

ATTACKER_LABELS = {"mlp": "MLP", "svm": "SVM", "knn": "kNN"}
METRIC_KEYS = ("ap", "chance_ap", "x_chance", "top1", "top5")


SUMMARY_KEYS = ("users", "rounds", "attackers", "utility", "pool", "rounds_log", "fl_seconds", "attack_fit_seconds")


class RunFolderError(ValueError):
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
        runs[rule] = run
    return runs


def prior_label(rule: str, run: dict) -> str:
    """``chrono (row order)`` where the data had no timestamps and the experiment opted in to its row order."""
    return f"{rule} (row order)" if rule == "chrono" and run.get("time") == "row order" else rule


def combined_metrics(runs: dict[str, dict]) -> dict[str, dict]:
    """``{"attack_sandbox": {prior: how the attack code was confined}, prior: {attacker: {ap, chance_ap,
    x_chance, top1, top5}}}``: how the attack side ran comes first."""
    sandbox = {rule: run.get("attack_sandbox", "unknown (a run from before the sandbox)") for rule, run in runs.items()}
    scores = {rule: {name: {k: m[k] for k in METRIC_KEYS} for name, m in run["attackers"].items()} for rule, run in runs.items()}
    return {"attack_sandbox": sandbox, **scores}


def sandbox_line(runs: dict[str, dict]) -> str:
    """The report's first line after its title: where the attack code ran; a warning when it was not confined."""
    how = dict.fromkeys(run.get("attack_sandbox", "unknown (a run from before the sandbox)") for run in runs.values())
    text = "; ".join(how)
    return f"**Warning: the attack code ran {text}.**" if "NOT SANDBOXED" in text else f"Attack side: {text}."


def table_rows(runs: dict[str, dict]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the Table-3 form: AP (× chance), top-1, top-5 per prior, in percent."""
    header = ["attacker"]
    for rule, run in runs.items():
        label = prior_label(rule, run)
        header += [f"{label} AP", f"{label} top-1", f"{label} top-5"]
    names = list(dict.fromkeys(n for run in runs.values() for n in run["attackers"]))
    rows = []
    for name in names:
        row = [ATTACKER_LABELS.get(name, name)]
        for run in runs.values():
            m = run["attackers"].get(name)
            row += (
                [f"{100 * m['ap']:.1f} ({m['x_chance']:.0f}×)", f"{100 * m['top1']:.1f}", f"{100 * m['top5']:.1f}"]
                if m
                else ["-"] * 3
            )
        rows.append(row)
    chance = ["Chance"]
    for run in runs.values():
        any_m = next(iter(run["attackers"].values()), None)
        u = run["users"]
        chance += [f"{100 * any_m['chance_ap']:.1f} (1×)" if any_m else "-", f"{100 / u:.1f}", f"{100 * min(5, u) / u:.1f}"]
    rows.append(chance)
    return header, rows


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _plot(runs: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for rule, run in runs.items():
        style = "-" if rule == "random" else "--"
        for name, m in run["attackers"].items():
            rounds = sorted(int(r) for r in m["per_round"])
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
            f"{g}: AP {100 * gm['ap']:.1f} ({gm['x_chance']:.1f}×), top-1 {100 * gm['top1']:.1f}"
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
        extra = f" ({p['note']})" if p.get("note") else ""
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


def _suite_lines(rule: str, run: dict) -> list[str]:
    """The further attacks of the suite: their scalar metrics, tables and figures, as scored."""
    lines = []
    for name, m in run.get("suite", {}).items():
        scalars = ", ".join(f"{k} {v:.3f}" for k, v in m.items() if isinstance(v, int | float) and not isinstance(v, bool))
        lines += [f"#### {name} ({rule} prior)", "", *([f"- {scalars}"] if scalars else []), *m.get("notes", [])]
        for title, table in m.get("tables", {}).items():
            lines += ["", f"{title}", "", _markdown_table(table["header"], [[str(c) for c in r] for r in table["rows"]])]
        lines += [f"\n![{name}]({rule}/{fig})" for fig in m.get("figures", [])]
        lines.append("")
    return lines


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


def write_report(run_dir: Path) -> Path:
    """Write ``metrics.json``, ``report.md`` and ``reid_by_round.png`` into ``run_dir``."""
    runs = load_runs(run_dir)
    if not runs:
        raise FileNotFoundError(f"no per-prior metrics.json under {run_dir}")
    (run_dir / "metrics.json").write_text(json.dumps(combined_metrics(runs), indent=2))
    _plot(runs, run_dir / "reid_by_round.png")
    header, rows = table_rows(runs)
    first = next(iter(runs.values()))
    lines = [
        "# leakbed report",
        "",
        sandbox_line(runs),
        "",
        f"Closed-world re-identification of anonymous updates (seed 001 §6.1.1, Table 3 form), "
        f"{first['users']} users, {first['rounds']} FL rounds. AP is the mean over users of the "
        "per-user average precision, in percent, with its multiple of chance AP; top-1/top-5 are accuracies in percent. "
        "Chance AP is the expected AP of a random ranking on the same test updates (it tends to 1/U, the seed's "
        "approximation, as test updates per user grow).",
        f"Update representation: {', '.join(first['attack_layers'])} (Δw flattened, L2-normalised).",
        "",
        _markdown_table(header, rows),
        "",
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
            f"- failed replies {failed}, rejected {rejected}",
            *_attack_side_lines(run),
            *_defense_lines(run),
            *_privacy_lines(run),
            *[f"- attacker {n} has no result: {why}" for n, why in run.get("attackers_failed", {}).items()],
            "",
        ]
    lines += ["![re-identification by round](reid_by_round.png)", ""]
    suite = [line for rule, run in runs.items() for line in _suite_lines(rule, run)]
    if suite:
        lines += ["## Further attacks", "", *suite]
    participant = [line for rule, run in runs.items() for line in participant_lines(rule, run)]
    if participant:
        lines += ["## Participant attacks", "", "Attacks by adversarial devices, not by the server.", "", *participant]
    analyses = analysis_lines(run_dir)
    if analyses:
        lines += ["## Analyses", "", *analyses]
    path = run_dir / "report.md"
    path.write_text("\n".join(lines))
    return path
