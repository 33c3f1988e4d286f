"""``leakbed run``, ``validate``, ``feature-inference`` and ``report``: one experiment in the Ray simulation, its
config checked and frozen, and its report."""

from __future__ import annotations

import sys
from pathlib import Path

from leakbed import console
from leakbed.commands import experiment
from leakbed.commands.options import Config, NoiseFrom, Out, RayAddress, RunDir, Sets
from leakbed.core.config import dump_config, load_config
from leakbed.package_data import config_file

RECONSTRUCTION_SUITE = 'attack.suite=["feature-inference", "dlg", "inverting-gradients"]'


def run(config: Config = None, set_: Sets = None, out: Out = None, ray_address: RayAddress = None,
        noise_from: NoiseFrom = None) -> int:  # fmt: skip
    cfg = load_config(config_file(config), [*(set_ or []), *experiment.ray_set(ray_address)])
    run_dir = experiment.out_dir(cfg, out)
    cfg = experiment.preflight(cfg)
    if noise_from:  # the referee's kept secrets, so the DP noise is the finished run's (leakbed.referee.noise)
        from leakbed.referee.noise import hand_back

        hand_back(Path(noise_from), run_dir, list(cfg.split.priors))
    from leakbed.interrupts import Interrupted
    from leakbed.run_state import mark_interrupted

    try:  # a SimulationFailed (Ray never started, no device answered within fl.startup_timeout) is leakbed.cli's to say
        with console.progress() as bar:
            report = experiment.run_experiment(cfg, run_dir, bar)
    except Interrupted as err:  # everything it started has been stopped on the way here
        print(f"leakbed: {mark_interrupted(cfg, run_dir, str(err))}", file=sys.stderr)
        raise
    experiment.print_tables(run_dir)
    print(f"report: {report}")
    return experiment.failed_replies(run_dir)


def feature_inference(config: Config = None, set_: Sets = None, out: Out = None) -> int:
    """A preset of ``leakbed run``: seed 004's reconstruction attacks (deep-feature inference, DLG, Inverting
    Gradients) as the run's suite; the config's own --set overrides come after it."""
    return run(config, [RECONSTRUCTION_SUITE, *(set_ or [])], out)


def validate(config: Config = None, set_: Sets = None) -> int:
    cfg = experiment.preflight(load_config(config_file(config), set_ or []))
    print(dump_config(cfg), end="")
    return 0


def report(run_dir: RunDir) -> int:
    from leakbed.report import RunFolderError, write_report

    folder = Path(run_dir)
    if not folder.is_dir():
        raise RunFolderError(f"{folder}: no such run folder")
    if not (folder / "config.toml").is_file():
        raise RunFolderError(f"{folder}: not a run folder (no config.toml)")
    path = write_report(folder)
    experiment.print_tables(folder)
    print(f"report: {path}")
    return 0
