"""The ServerApp's main: one FL run with the curious strategy.

The same main serves ``leakbed run`` (Ray simulation) and ``flwr run .`` (simulation or
deployment); ``leakbed.apps`` binds it to a config, a run layout and the referee's judge, which
the server itself never builds (it holds no truth beyond sealing).
"""

from __future__ import annotations

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from core.config import ExperimentConfig
from core.layout import RunLayout
from server.cancel import RunControl, controlled_main
from server.experiment import Progress, run_federation
from server.judge import Judge


def build_server_app(
    cfg: ExperimentConfig,
    rule: str,
    layout: RunLayout,
    judge: Judge,
    progress: Progress | None = None,
    control: RunControl | None = None,
) -> ServerApp:
    """A ServerApp whose main runs ``cfg`` under ``rule`` into ``layout``."""
    bound = ServerApp()

    @bound.main()
    def _main(grid: Grid, context: Context) -> None:
        controlled_main(lambda g: run_federation(g, cfg, rule, layout, judge, progress), grid, control)

    return bound
