"""What the commands that run experiments share: the preflight, the output folder, running every prior of a config
in the simulation, and the tables printed after a run."""

from __future__ import annotations

from pathlib import Path

from leakbed import console
from leakbed.core.config import ConfigError, ExperimentConfig, dump_config
from leakbed.core.paths import default_run_dir


def preflight(cfg: ExperimentConfig) -> ExperimentConfig:
    """The config with its plugins resolved, once every prior's federation loads and everything the config names
    can run on it (``leakbed.preflight``): bad input fails before anything starts."""
    from leakbed.preflight import preflight as check

    return check(cfg)


def ray_set(address: str | None) -> list[str]:
    """``--ray-address HOST:PORT`` as the last override (``simulation.ray_address``)."""
    return [] if address is None else [f"simulation.ray_address={address}"]


def out_dir(cfg: ExperimentConfig, out: str | None) -> Path:
    """``--out`` (or a new folder under ``$LEAKBED_HOME/runs``); ConfigError when it exists and holds anything."""
    path = Path(out) if out else default_run_dir(cfg.name)
    if path.exists() and any(path.iterdir()):
        raise ConfigError(f"--out {path}: folder exists and is not empty; refusing to overwrite it")
    return path


def run_experiment(cfg: ExperimentConfig, run_dir: Path, bar, label: str = "", link=None) -> Path:  # noqa: ANN001
    """Every prior of ``cfg`` (preflighted) on the simulation SuperLink ``link`` (or one of its own), then the
    report; returns its path. The ServerApp holds /metrics ``telemetry.hold_seconds`` after each prior."""
    from contextlib import nullcontext

    from leakbed.report import write_report
    from leakbed.simulate import simulate, simulation_link

    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.toml").write_text(dump_config(cfg))
    with nullcontext(link) if link is not None else simulation_link(cfg, run_dir / "logs") as link:
        for rule in cfg.split.priors:
            title = f"{label}{rule} prior: FL rounds"
            task = bar.add_task(title, total=cfg.fl.rounds)
            attack: list[int] = []  # the attack side's bar, from its first figures (rounds analysed, lag, fits)

            def progress(rnd: int, util: dict[str, float], task: int = task, title: str = title, attack: list[int] = attack,
                         rule: str = rule) -> None:  # fmt: skip
                if rnd:
                    bar.update(task, completed=rnd, description=f"{title} (utility {util['utility']:.3f})")
                if "attack_rounds" in util:
                    side = f"{label}{rule} prior: attacks"
                    if not attack:
                        attack.append(bar.add_task(side, total=cfg.fl.rounds))
                    bar.update(attack[0], completed=util["attack_analysed"], description=console.attack_progress(side, util))

            simulate(cfg, rule, run_dir, progress, link)
    return write_report(run_dir)


def print_tables(run_dir: Path) -> None:
    """Each prior's replies first (failures grouped by kind), the closed-world table (or one line where the suite had
    no closed-world attacker); beside it the suite's other attacks the referee scored, then the attacks scored by
    their own plugin scorers in a table of their own (never the referee's numbers), and where each is written. Shares
    are in percent throughout (``report.UNITS``); how each table is chosen is on ``report.TABLES_PAGE``."""
    from leakbed.audit_report import HEADER, audit_caption, audit_rows
    from leakbed.report import (
        NO_CLOSED_WORLD,
        PLUGIN_SECTION,
        TABLES_PAGE,
        load_runs,
        other_attack_rows,
        plugin_rows,
        replies_line,
        table_footnote,
        table_rows,
        written_line,
    )

    runs = load_runs(run_dir)
    for rule, run in runs.items():  # first: how many replies failed, and how many users the numbers rest on
        if run.get("replies"):
            console.print_plain(replies_line(rule, run["replies"], "console"))
    header, closed = table_rows(runs)
    if closed:
        title = "Re-identification (closed world): AP % (× chance), top-1 %, top-5 %"
        console.print_table(title, header, closed, caption=table_footnote(runs))
    else:
        console.print_plain(NO_CLOSED_WORLD)
    if audited := audit_rows(runs):
        console.print_table("Empirical privacy audit: ε estimated from canaries vs the accountant's", HEADER, audited,
                            caption=audit_caption(runs))  # fmt: skip
    header, rows = other_attack_rows(runs)
    if rows:
        console.print_table("Other attacks (scored by the referee; shares in %; details in the report)", header, rows)
    header, plugin = plugin_rows(runs)
    if plugin:
        console.print_table(f"{PLUGIN_SECTION}; shares in %", header, plugin)
    if rows or plugin:
        console.print_plain(written_line(run_dir, runs))
        console.print_plain(f"how each table is chosen: {TABLES_PAGE} (leakbed's documentation)")


def failed_replies(run_dir: Path) -> int:
    """1 with one line when a prior's share of failed or rejected replies passed ``fl.max_failed_share`` (its numbers
    rest on too few updates; what it wrote is kept), else 0. The line gives the verdict only: the replies line above
    it (``print_tables``) said how many failed and why, with the same figures."""
    import json
    import sys

    from leakbed.failure_kinds import limit_text, share_text

    for path in sorted(run_dir.glob("*/metrics.json")):
        replies = json.loads(path.read_text()).get("replies")
        if replies and replies.get("too_many_failed"):
            print(
                f"leakbed: run failed: the {path.parent.name} prior's failed replies, {share_text(replies['failed_share'])}, "
                f"are more than fl.max_failed_share {limit_text(replies['max_failed_share'])} allows (why: the replies "
                "line above); what it wrote is kept",
                file=sys.stderr,
            )
            return 1
    return 0
