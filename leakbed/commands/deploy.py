"""``leakbed deploy-local``: the deployment topology as local processes (``leakbed.deploy_local``)."""

from __future__ import annotations

from typing import Annotated

import typer

from leakbed.commands import experiment
from leakbed.commands.options import Config, Out, Sets, Workers
from leakbed.core.config import ConfigError, load_config
from leakbed.package_data import config_file


def deploy_local(
    config: Config = None,
    set_: Sets = None,
    out: Out = None,
    supernodes: Annotated[int, typer.Option(min=0, help="SuperNodes, one per user: must equal the federation's users; "
                                            "0: that many [count]")] = 0,
    workers: Workers = 2,
    metrics_port: Annotated[int, typer.Option(min=0, max=65535, help="the ServerApp's /metrics port; 0: a free one "
                                              "[port]")] = 0,
    hold: Annotated[float, typer.Option(min=0, max=86_400, help="keep /metrics up this long after each run [s]")] = 5.0,
) -> int:  # fmt: skip
    from leakbed.core.data import federation
    from leakbed.deploy_local import deploy_local

    cfg = load_config(config_file(config), set_ or [])
    folder = experiment.out_dir(cfg, out)
    cfg = experiment.preflight(cfg)
    users = len(federation(cfg, cfg.split.priors[0]).user_ids)
    n = supernodes or users
    if n != users:
        raise ConfigError(f"--supernodes {n}: the federation has {users} users and each SuperNode is one user")
    # a step that fails is a DeployError: leakbed.cli says "deploy-local failed: ..." and exits 1
    deploy_local(cfg, folder, supernodes=n, workers=workers, metrics_port=metrics_port, hold_seconds=hold)
    return 0
