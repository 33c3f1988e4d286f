"""The attack pool of a study: the run's attack code re-fitted on a study's own stores, each fit in a sandboxed lane
of its own (``workers``), with the run's parameters of it checked against its declaration."""

from __future__ import annotations

from pathlib import Path

from leakbed.core.config import ConfigError, ExperimentConfig
from leakbed.core.declaration import Declaration, ParamsError, check_params
from leakbed.core.entry_points import PluginError
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.workers import AttackPool
from leakbed.workers.introspect import for_workers
from leakbed.workers.sandbox import limits_for


def declarations_of(cfg: ExperimentConfig, names: list[str]) -> dict[str, Declaration]:
    """The declarations of ``names`` (learnt in a sandbox, cached); ConfigError (one line) for one that fails."""
    try:
        return for_workers(cfg.workers).declarations(names)
    except PluginError as err:
        raise ConfigError(f"attack.suite: {err}") from None


def study_pool(
    cfg: ExperimentConfig, knowledge: AttackerKnowledge, root: Path, attacks: list[str], run_id: str, count: int | None = None
) -> AttackPool:
    """A pool over the stores under ``root / "store"`` (the knowledge filed under ``run_id``), writing the checked
    outputs under ``root / "outputs"`` and the lanes' logs under ``root / "logs"``."""
    decls = declarations_of(cfg, attacks)
    try:
        params = {n: check_params(decls[n], cfg.attack.params.get(n), f"attack.params.{n}") for n in attacks}
    except ParamsError as err:
        raise ConfigError(str(err)) from None
    w = cfg.workers
    return AttackPool(
        knowledge,
        str(root / "store"),
        declarations=decls,
        params=params,
        outputs=root / "outputs",
        count=count or w.count,
        queue_size=w.queue_size,
        submit_timeout=w.submit_timeout,
        run_id=run_id,
        sandbox=limits_for(w)[0],
        log_dir=root / "logs",
        task_deadline=w.task_deadline,
        drain_deadline=w.drain_deadline,
        max_result_mb=w.limits.result,
        log_mb=w.limits.log,
        shadow=False,
    )
