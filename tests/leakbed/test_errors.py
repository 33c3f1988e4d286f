"""One error root (issue 39.5): every exception class leakbed defines for bad input derives from ``LeakbedError``, the
internal ones are listed here with why, and the CLI maps a ``LeakbedError`` in one place (``leakbed.cli.refused``)."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "leakbed"

# Exceptions that are not bad input: internal control flow or a run's own outcome, never a refusal the user sees.
INTERNAL = {
    "Interrupted": "a BaseException like KeyboardInterrupt: a signal ends the command (leakbed.interrupts)",
    "StartupTimeout": "the ServerApp's bounded start; the simulation reports it as SimulationFailed",
    "TruthExists": "the referee's seal is written once: an invariant of leakbed's own code",
    "ScorerError": "raised while scoring; the judge records it as that attack's failure and the run goes on",
    "Incomplete": "the reference pages' generator refuses a key it does not document: a developer's error",
    "NotReady": "waiting for Flower's SuperLink; the launchers retry or fail the run",
    "EncoderError": "inside the cross-modal attack's sandbox: its task fails",
    "Refused@leakbed/attacks/params_language.py": "inside the introspection; turned into a declaration's refusal",
    "FrameError": "the worker channel's framing: hostile data, the lane is ended",
    "FrameClosed": "the worker channel ended",
    "FrameDeadline": "a frame past its deadline: the lane is ended",
    "HostileData": "an attack's outputs that fail a bound: that attack's failure, recorded",
    "OutputsError": "an attack's outputs not of its scorer kind's form: that attack's failure, recorded",
    "LaneDied": "a sandboxed lane ended; the pool restarts it",
    "LaneBroke": "a lane broke the worker protocol: ended, its task failed",
    "LaneDeadline": "a lane's task past its deadline",
    "TaskFailed": "an attack's task failed in its lane: recorded",
    "PluginScorerError": "a plugin's own scorer failed: that attack's failure, recorded",
    "NoUid": "no free sandbox uid: the pool waits or runs fewer lanes",
    "NoAnswer": "a one-shot sandbox call gave no answer: the caller turns it into its own refusal",
    "ConfigKeyMoved": "a warning (an old config key is read as its new name), not an error",
    "FlowerDeprecationWarning": "a warning: Flower's deprecation notices, raised so the tests see them",
    "LeakbedDeprecationWarning": "a warning: a deprecated name of leakbed.plugin",
}


def _classes() -> dict[str, tuple[str, list[str]]]:
    """Every class defined in leakbed: key (its name, or name@path where two share it) -> (path, its bases' names)."""
    found: dict[str, list[tuple[str, list[str]]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
            continue
        rel = str(path.relative_to(REPO))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases]
                found.setdefault(node.name, []).append((rel, bases))
    out = {}
    for name, defs in found.items():
        for rel, bases in defs:
            out[name if len(defs) == 1 else f"{name}@{rel}"] = (rel, bases)
    return out


def _derives(key: str, classes: dict[str, tuple[str, list[str]]], root: str) -> bool:
    """Whether the class ``key`` derives from ``root`` (a leakbed class or a built-in exception) by its bases' names."""
    seen: set[str] = set()
    todo = [key]
    by_name = {k.split("@")[0]: k for k in classes}
    while todo:
        k = todo.pop()
        if k in seen:
            continue
        seen.add(k)
        for base in classes[k][1] if k in classes else []:
            if base == root:
                return True
            if base in by_name:
                todo.append(by_name[base])
            elif k.split("@")[0] != base and f"{base}@{classes[k][0]}" in classes:
                todo.append(f"{base}@{classes[k][0]}")
    return False


def _is_exception(key: str, classes: dict[str, tuple[str, list[str]]]) -> bool:
    builtin = [n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)]
    return any(_derives(key, classes, b) for b in builtin)


def test_every_bad_input_error_derives_from_leakbed_error() -> None:
    classes = _classes()
    exceptions = sorted(k for k in classes if _is_exception(k, classes))
    assert len(exceptions) >= 30, exceptions  # the scan sees leakbed's exception classes (34 when this was written)
    rooted = [k for k in exceptions if _derives(k, classes, "LeakbedError")]
    unrooted = [k for k in exceptions if k not in rooted and k.split("@")[0] != "LeakbedError"]
    stray = sorted(set(unrooted) - set(INTERNAL))
    assert not stray, f"exception classes neither deriving from LeakbedError nor listed as internal: {stray}"
    assert not set(INTERNAL) - set(unrooted), f"listed as internal but not (or no longer) so: {set(INTERNAL) - set(unrooted)}"
    for name in ("ConfigError", "DataError", "PluginError", "ParamsError", "RunFolderError", "ComposeError", "EngineError",
                 "StagingError", "SimulationFailed", "DeployError", "Refused@leakbed/apps.py"):  # fmt: skip
        assert name in rooted, name


def test_the_bad_input_classes_keep_their_builtin_base_and_exit_code() -> None:
    from leakbed.core.config import ConfigError
    from leakbed.core.data import DataError
    from leakbed.core.errors import Failed, LeakbedError
    from leakbed.deploy_local import DeployError
    from leakbed.simulate import SimulationFailed

    assert issubclass(ConfigError, ValueError) and issubclass(DataError, ValueError)  # `except ValueError` still holds
    assert LeakbedError.exit_code == 2 and ConfigError.exit_code == 2
    assert Failed.exit_code == 1 and SimulationFailed("x").what == "run" and DeployError("x").what == "deploy-local"
    assert Failed("x", "analysis").what == "analysis" and issubclass(SimulationFailed, RuntimeError)


def test_the_cli_maps_leakbed_error_in_one_place() -> None:
    """No command catches its own tuple of errors: the only handlers left in ``leakbed/commands`` are the
    interrupt's (it marks the run, then re-raises) and the sandbox's (it ends the sandbox, then re-raises); the one
    ``except LeakbedError`` is ``leakbed.cli.main``'s."""
    handlers: dict[str, list[str]] = {}
    for path in [PACKAGE / "cli.py", *sorted((PACKAGE / "commands").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ExceptHandler):
                caught = ast.unparse(node.type) if node.type else "everything"
                handlers.setdefault(str(Path(path).relative_to(REPO)), []).append(caught)
                if caught in ("Interrupted", "BaseException") and path.name != "cli.py":
                    assert isinstance(node.body[-1], ast.Raise), f"{path.name}: {caught} is handled and not re-raised"
    assert handlers.pop("leakbed/cli.py") == ["Interrupted", "LeakbedError", "click.UsageError", "click.ClickException",
                                              "click.exceptions.Abort"]  # fmt: skip
    assert handlers == {"leakbed/commands/run.py": ["Interrupted"], "leakbed/commands/sandbox.py": ["BaseException"]}
