"""The Flower apps of a run, wired: the server's main with the referee's judge.

``server_app`` is what ``flwr run .`` loads (simulation or deployment; run config keys
``config``, ``set``, ``prior``, ``out-dir``); ``bound_server_app`` gives ``leakbed run`` the same
main bound to an already validated config. Both are built here, on top of the rooms, because
only the product may hand the server a judge that reads the truth.
"""

from __future__ import annotations

from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from core.config import ExperimentConfig, dump_config, load_config, split_overrides
from core.data import federation
from core.layout import RunLayout
from core.paths import default_run_dir
from leakbed.registry import check_needs, check_suite
from leakbed.report import write_report
from referee.judge import RunJudge
from server.app import build_server_app
from server.cancel import RunControl
from server.experiment import Progress, run_federation
from server.metrics import hold as hold_metrics
from server.secagg import build_secagg_server_app, run_secagg_federation

server_app = ServerApp()


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    """``flwr run .``: one prior of the configured experiment into ``out-dir``, then the report."""
    rc = context.run_config
    cfg = load_config(str(rc.get("config", "")) or None, split_overrides(str(rc.get("set", ""))))
    check_suite(cfg)
    rule = str(rc.get("prior", "")) or cfg.split.priors[0]
    check_needs(cfg, federation(cfg, rule))  # the attacks' declared needs, before any round is sent
    layout = RunLayout.from_env(Path(str(rc.get("out-dir", "")) or default_run_dir(cfg.name, f"flwr-{context.run_id}")))
    layout.root.mkdir(parents=True, exist_ok=True)
    layout.config.write_text(dump_config(cfg))
    if cfg.fl.secure_aggregation == "secagg+":  # client.app:app hands the SecAgg+ stages to client.secagg
        run_secagg_federation(grid, context, cfg, rule, layout, RunJudge(cfg, layout, rule))
    else:
        run_federation(grid, cfg, rule, layout, RunJudge(cfg, layout, rule))
    write_report(layout.root)
    hold_metrics(cfg.telemetry)  # a scrape after the end still finds the final values


def bound_server_app(
    cfg: ExperimentConfig, rule: str, layout: RunLayout, progress: Progress | None = None, control: RunControl | None = None
) -> ServerApp:
    """The ServerApp of one prior of ``cfg`` (plain or SecAgg+), scored by the referee."""
    build = build_secagg_server_app if cfg.fl.secure_aggregation == "secagg+" else build_server_app
    return build(cfg, rule, layout, RunJudge(cfg, layout, rule), progress, control)
