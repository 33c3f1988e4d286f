"""The ServerApp every run uses, wired: the server's main with the referee's judge and the defenses' server halves.

``server_app`` is what ``flwr run`` loads, in simulation (``leakbed run`` submits its runs this way too) and
in a deployment; run config keys ``config`` (an experiment TOML, or a built-in config's name), ``set``
(overrides), ``prior`` and ``out-dir``. It is built here, on top of the rooms, because only the product may hand
the server a judge that reads the truth and the defenses' server halves. Its main runs the same preflight as the CLI first:
a config the run cannot serve is refused in one line (``leakbed: error: ...`` in the run's log), before
anything is written.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from leakbed import ray_actors
from leakbed.core.config import ConfigError, ExperimentConfig, dump_config, load_config, split_overrides
from leakbed.core.data import DataError
from leakbed.core.declaration import Declaration
from leakbed.core.errors import LeakbedError
from leakbed.core.layout import RunLayout
from leakbed.core.paths import default_run_dir
from leakbed.package_data import config_file
from leakbed.preflight import declarations, preflight, resolve
from leakbed.referee.judge import RunJudge
from leakbed.referee.seal import TRUTH_FILE
from leakbed.report import write_report
from leakbed.run_state import PROGRESS_FILE  # in a prior's results folder: the last finished round, its utility
from leakbed.server.experiment import run_federation
from leakbed.server.metrics import hold as hold_metrics
from leakbed.server_defenses import ServerDefenses


class Refused(LeakbedError, RuntimeError):
    """A run the preflight refused: its message is the one line the run's log shows."""


def _refusal(exc: BaseException | None) -> Refused | None:
    while exc is not None:
        if isinstance(exc, Refused):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


class OneLineRefusal(logging.Filter):
    """Flower logs a failed ServerApp with its traceback, several times; a refusal is one line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        refused = _refusal(record.exc_info[1] if record.exc_info else None)
        if refused is None and isinstance(record.args, tuple):  # e.g. "An exception occurred !! %s", ex
            refused = next((_refusal(a) for a in record.args if isinstance(a, BaseException)), None)
        if refused is not None:
            if getattr(refused, "_logged", False):
                return False
            refused._logged = True  # type: ignore[attr-defined]
            record.msg, record.args, record.exc_info, record.exc_text = f"leakbed: error: {refused}", (), None, None
            return True
        message = record.getMessage() if isinstance(record.msg, str) else ""
        return not (message.startswith("Traceback") and f"{__name__}.Refused" in message)


logging.getLogger("flwr").addFilter(OneLineRefusal())


def write_progress(folder: Path, rnd: int, rounds: int, utility: float, attack: dict[str, float] | None = None) -> None:
    """The last finished round, and where the attack side stands (``attack``: ``AttackPool.progress``), for a
    launcher's progress bars (replaced whole, never half-written)."""
    tmp = folder / f".{PROGRESS_FILE}.tmp"
    state = {"round": rnd, "rounds": rounds, "utility": utility, **({"attack": attack} if attack else {})}
    tmp.write_text(json.dumps(state), encoding="utf-8")
    os.replace(tmp, folder / PROGRESS_FILE)


def progress_writer(folder: Path, rounds: int) -> Callable[[int, dict[str, float]], None]:
    """The ServerApp's ``progress``: each finished round (its ``utility``) and each change of the attack side's figures
    (``attack_*`` values, from the pool's threads) written together into ``folder``'s progress file, once a round has
    been evaluated."""
    last: dict[str, float] = {}
    writing = threading.Lock()  # rounds come from the ServerApp's thread, the attack side's figures from the pool's

    def progress(rnd: int, values: dict[str, float]) -> None:
        with writing:
            last.update({"round": rnd, "utility": values["utility"]} if "utility" in values else {})
            last.update({k.removeprefix("attack_"): v for k, v in values.items() if k.startswith("attack_")})
            if "round" in last:
                attack = {k: v for k, v in last.items() if k not in ("round", "utility")}
                write_progress(folder, int(last["round"]), rounds, last["utility"], attack)

    return progress


def note_replaced(metrics: Path, count: int) -> None:
    """File in the prior's metrics.json (``replies.actors_replaced``) how many ClientApp actors died and were replaced
    during its run (``ray_actors``, in this process), so the console and the report say it, not only a log."""
    if count <= 0 or not metrics.is_file():
        return
    summary = json.loads(metrics.read_text(encoding="utf-8"))
    if isinstance(summary.get("replies"), dict):
        summary["replies"]["actors_replaced"] = int(count)
        tmp = metrics.with_name(f".{metrics.name}.tmp")
        tmp.write_text(json.dumps(summary, indent=2), encoding="utf-8")
        os.replace(tmp, metrics)


def checked(config: str, overrides: str, prior: str) -> tuple[ExperimentConfig, str, dict[str, Declaration]]:
    """The resolved config, the prior to run and the suite's declarations, or ``Refused`` (one line) before anything
    is written."""
    try:
        cfg = load_config(config_file(config), split_overrides(overrides))
        rule = prior or cfg.split.priors[0]
        if rule not in cfg.split.priors:
            raise ConfigError(f"prior {rule!r} is not one of split.priors {cfg.split.priors}")
        cfg = preflight(cfg, [rule])
        return cfg, rule, declarations(cfg)
    except (ConfigError, DataError, ValueError) as err:
        raise Refused(str(err).splitlines()[0]) from None


def same_experiment(path: Path, cfg: ExperimentConfig) -> bool:
    """Whether the config at ``path`` describes the resolved ``cfg`` (its plugins' parameters resolved the same)."""
    try:
        return resolve(load_config(path)) == cfg
    except (ConfigError, DataError, ValueError):
        return False


def claim(layout: RunLayout, cfg: ExperimentConfig, rule: str) -> None:
    """Take ``out-dir`` for this prior, or ``Refused`` when that would overwrite a run: the prior's truth, or
    another experiment's frozen config."""
    if (layout.referee(rule) / TRUTH_FILE).exists():
        raise Refused(f"out-dir {layout.root}: the {rule} prior has run there already; use a new out-dir")
    frozen = dump_config(cfg)
    if layout.config.exists() and not same_experiment(layout.config, cfg):
        raise Refused(f"out-dir {layout.root} holds another experiment's config.toml; use a new out-dir")
    layout.root.mkdir(parents=True, exist_ok=True)
    layout.config.write_text(frozen, encoding="utf-8")


server_app = ServerApp()


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    """One prior of the configured experiment into ``out-dir``, then the report."""
    ray_actors.install()  # in the Simulation Runtime's process: a ClientApp actor that dies is replaced
    rc = context.run_config
    cfg, rule, decls = checked(str(rc.get("config", "")), str(rc.get("set", "")), str(rc.get("prior", "")))
    layout = RunLayout.from_env(Path(str(rc.get("out-dir", "")) or default_run_dir(cfg.name, f"flwr-{context.run_id}")))
    claim(layout, cfg, rule)
    out = layout.results(rule)

    progress = progress_writer(out, cfg.fl.rounds)
    replaced = ray_actors.REPLACED["count"]
    run_federation(grid, cfg, rule, layout, RunJudge(cfg, layout, rule, decls), ServerDefenses(cfg), decls, progress)
    note_replaced(out / "metrics.json", ray_actors.REPLACED["count"] - replaced)
    report = write_report(layout.root)
    logging.getLogger("flwr").info("leakbed: %s prior finished; report: %s", rule, report)  # what `flwr run --stream` shows
    hold_metrics(cfg.telemetry)  # a scrape after the end still finds the final values
