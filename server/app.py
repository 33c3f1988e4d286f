"""The ServerApp: one FL run with the curious strategy.

``app`` is what ``flwr run .`` loads (simulation or deployment); its run config names the
experiment file, overrides, prior rule and output folder. ``build_server_app`` gives
``leakbed run`` the same main bound to an already validated config.
"""

from __future__ import annotations

from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from leakbed.config import ExperimentConfig, dump_config, load_config, split_overrides
from leakbed.paths import default_run_dir
from leakbed.report import write_report
from server.cancel import RunControl, controlled_main
from server.experiment import Progress, run_federation
from server.metrics import hold as hold_metrics

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """``flwr run .``: run config keys ``config`` (TOML path), ``set`` (space-separated k=v), ``prior``, ``out-dir``."""
    rc = context.run_config
    cfg = load_config(str(rc.get("config", "")) or None, split_overrides(str(rc.get("set", ""))))
    if cfg.fl.secure_aggregation != "none":  # the legacy SecAgg+ workflow needs its own ClientApp (client.secagg:app)
        raise ValueError("fl.secure_aggregation = 'secagg+' runs with `leakbed run` only, not with `flwr run .`")
    rule = str(rc.get("prior", "")) or cfg.split.priors[0]
    run_dir = Path(str(rc.get("out-dir", "")) or default_run_dir(cfg.name, f"flwr-{context.run_id}"))
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.toml").write_text(dump_config(cfg))
    run_federation(grid, cfg, rule, run_dir / rule)
    write_report(run_dir)
    hold_metrics(cfg.telemetry)  # a scrape after the end still finds the final values


def build_server_app(
    cfg: ExperimentConfig, rule: str, out: Path, progress: Progress | None = None, control: RunControl | None = None
) -> ServerApp:
    """A ServerApp whose main runs ``cfg`` under ``rule`` into ``out`` (used by ``leakbed run``)."""
    bound = ServerApp()

    @bound.main()
    def _main(grid: Grid, context: Context) -> None:
        controlled_main(lambda g: run_federation(g, cfg, rule, out, progress), grid, control)

    return bound
