"""One launcher (``leakbed.launcher``): the simulation, the local deployment and compose all are ``Launcher``s; a process
launcher owns every process it starts (found by its mark, ended by ``stop``, also on an exception or an interrupt);
compose's launcher on a fake engine (tests/deploy/test_containers.py runs it on a real one)."""

from __future__ import annotations

import inspect
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from leakbed import flower, images, interrupts, stack
from leakbed.commands import compose as compose_command
from leakbed.core.processes import MARK, alive, marked
from leakbed.deploy_local import Deployment
from leakbed.engine import Engine, EngineError
from leakbed.launcher import Launcher, ProcessLauncher
from leakbed.simulate import SimulationLink

LAUNCHERS = (ProcessLauncher, SimulationLink, Deployment, stack.ComposeLauncher)
# a process that starts a child in a session of its own (as Ray's daemons detach), says its pid, and sleeps
FORKS = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen(['sleep', '30'], start_new_session=True)\n"
    "print('child', child.pid, flush=True)\n"
    "time.sleep(30)\n"
)


def _fits(protocol_fn: object, impl_fn: object) -> str:
    """'' when ``impl_fn`` accepts every call the Protocol's method accepts, else why not."""
    want, got = inspect.signature(protocol_fn), inspect.signature(impl_fn)  # type: ignore[arg-type]
    if any(p.kind is p.VAR_POSITIONAL for p in want.parameters.values()):
        return ""  # start: its arguments are each launcher's own
    for name, p in want.parameters.items():
        if p.kind is p.VAR_POSITIONAL or p.kind is p.VAR_KEYWORD:
            if not any(q.kind is p.kind for q in got.parameters.values()):
                return f"no {p}"
            continue
        q = got.parameters.get(name)
        if q is None or q.kind is not p.kind or q.default != p.default:
            return f"{name}: {q} for {p}"
    extra = [
        q for n, q in got.parameters.items() if n not in want.parameters and q.kind in (q.POSITIONAL_OR_KEYWORD, q.KEYWORD_ONLY)
    ]
    return ", ".join(f"{q} has no default" for q in extra if q.default is q.empty)


@pytest.mark.parametrize("cls", LAUNCHERS, ids=lambda c: c.__name__)
def test_every_launcher_is_a_launcher(cls: type) -> None:
    bare = cls.__new__(cls)  # nothing started (a SimulationLink's constructor starts a SuperLink)
    assert isinstance(bare, Launcher)
    for name in ("start", "wait", "stop", "logs", "__enter__", "__exit__"):
        assert not (why := _fits(getattr(Launcher, name), getattr(cls, name))), f"{cls.__name__}.{name}: {why}"


def test_what_lacks_a_method_or_takes_another_shape_is_not_one() -> None:
    class NoLogs:
        def start(self) -> None: ...
        def wait(self, timeout: float | None = None) -> int | None: ...
        def stop(self) -> None: ...
        def __enter__(self) -> NoLogs: ...
        def __exit__(self, *exc: object) -> None: ...

    class WaitsForOne(NoLogs):
        def logs(self) -> dict[str, Path]: ...
        def wait(self, proc: object, timeout: float | None = None) -> int | None: ...  # type: ignore[override]

    assert not isinstance(NoLogs(), Launcher)
    assert isinstance(WaitsForOne(), Launcher)  # runtime_checkable sees names only: the signature check does the rest
    assert _fits(Launcher.wait, WaitsForOne.wait)


def _process_launcher(kind: type, folder: Path) -> ProcessLauncher:
    return Deployment(folder, dict(os.environ)) if kind is Deployment else ProcessLauncher(folder / "logs", os.environ)


@pytest.mark.parametrize("kind", [ProcessLauncher, Deployment], ids=lambda c: c.__name__)
def test_a_process_launcher_owns_what_it_starts_and_ends_it_all(kind: type, tmp_path: Path) -> None:
    launcher = _process_launcher(kind, tmp_path)
    try:
        assert launcher.group in interrupts._GROUPS  # a stop signal ends it
        proc = launcher.start("sleeper", [sys.executable, "-c", FORKS])
        log = tmp_path / "logs" / "sleeper.log"
        flower.wait_until(lambda: "child" in log.read_text(), 60, "the child's pid")
        child = int(log.read_text().split()[1])
        assert {proc.pid, child} <= set(marked(MARK, launcher.mark))  # the child left the session, not the mark
        assert launcher.wait(timeout=0) is None  # still running
        assert launcher.logs() == {"sleeper": log}
    finally:
        launcher.stop()
    assert marked(MARK, launcher.mark) == [] and not alive(child)
    # ended (its exit status is psutil's, which reaped it inside ProcessGroup.stop: Popen then reads 0)
    assert launcher.wait(timeout=0) is not None and proc.returncode is not None
    assert launcher.group not in interrupts._GROUPS
    launcher.stop()  # again: nothing to do, no error
    assert launcher.group not in interrupts._GROUPS


def test_wait_gives_the_first_failure_in_start_order(tmp_path: Path) -> None:
    with ProcessLauncher(tmp_path, os.environ) as launcher:
        launcher.start("fine", [sys.executable, "-c", "pass"])
        assert launcher.wait() == 0
        launcher.start("three", [sys.executable, "-c", "raise SystemExit(3)"])
        launcher.start("four", [sys.executable, "-c", "raise SystemExit(4)"])
        assert launcher.wait() == 3
        assert set(launcher.logs()) == {"fine", "three", "four"}


@pytest.mark.parametrize("error", [RuntimeError("boom"), interrupts.Interrupted(signal.SIGINT)], ids=["error", "interrupt"])
def test_as_a_context_manager_it_stops_on_an_exception(tmp_path: Path, error: BaseException) -> None:
    with pytest.raises(type(error)), ProcessLauncher(tmp_path, os.environ) as launcher:
        proc = launcher.start("sleeper", ["sleep", "30"])
        assert alive(proc.pid)
        raise error
    assert marked(MARK, launcher.mark) == [] and proc.returncode is not None
    assert launcher.group not in interrupts._GROUPS


# compose's launcher on a fake engine: one script answers as the engine's CLI and (``fake compose ...``) as compose,
# recording every call and reading its answers from files in its state folder
FAKE_ENGINE = """\
import json, os, sys
from pathlib import Path

state = Path(os.environ["FAKE_STATE"])
args = sys.argv[1:]
with (state / "calls").open("a") as f:
    f.write(json.dumps(args) + "\\n")
if args[0] == "compose":
    rest = args[1:]
    while rest and rest[0] in ("-p", "--project-directory", "-f"):
        rest = rest[2:]
    if rest[0] == "logs":
        print("stdout of", rest[-1], flush=True)
        print("stderr of", rest[-1], file=sys.stderr, flush=True)
    elif rest[0] == "ps" and (state / "ps").exists():
        print((state / "ps").read_text(), end="")
    elif rest[0] == "up":
        sys.exit(int((state / "up-exit").read_text()) if (state / "up-exit").exists() else 0)
elif args[0] == "ps" and (state / "left").exists():  # leftovers: containers by the project's label
    print((state / "left").read_text(), end="")
elif args[0] == "rm" and (state / "left").exists() and not (state / "stuck").exists():  # removed by name
    (state / "left").unlink()
"""


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Engine, stack.Stack, Path]:
    monkeypatch.setattr(stack, "WORK", tmp_path / "work")
    monkeypatch.setattr(stack, "SWEEP_S", 0.0)
    state = tmp_path / "state"
    state.mkdir()
    script = tmp_path / "fake-engine"
    script.write_text(f"#!{sys.executable}\n{FAKE_ENGINE}")
    script.chmod(0o755)
    engine = Engine("docker", str(script), (str(script), "compose"), {"FAKE_STATE": str(state)})
    return engine, stack.Stack("proj", 2, 1, False), state


def _calls(state: Path) -> list[list[str]]:
    return [json.loads(line) for line in (state / "calls").read_text().splitlines()] if (state / "calls").exists() else []


def test_compose_logs_are_one_file_per_service(fake: tuple[Engine, stack.Stack, Path]) -> None:
    engine, s, state = fake
    launcher = stack.ComposeLauncher(engine, s)
    assert launcher.logs() == {}  # nothing rendered: no stack, no logs
    stack.render(s, images.LOCAL)
    logs = launcher.logs()
    services = ["attack-worker-0", "clientapp-0", "clientapp-1", "prometheus", "serverapp", "superlink", "supernode-0"]
    assert sorted(logs) == [*services, "supernode-1"]
    for service, path in logs.items():
        assert path == s.folder / "logs" / f"{service}.log"
        assert path.read_text().splitlines() == [f"stdout of {service}", f"stderr of {service}"]
    asked = [c for c in _calls(state) if "logs" in c]
    assert all(c[:3] == ["compose", "-p", "proj"] and c[-3:-1] == ["--no-color", "--no-log-prefix"] for c in asked)


def test_compose_stop_is_down_and_keeps_what_is_left(fake: tuple[Engine, stack.Stack, Path], capsys) -> None:
    engine, s, state = fake
    stack.render(s, images.LOCAL)
    (state / "left").write_text("proj-superlink-1\n")
    (state / "stuck").write_text("")  # no removal takes it
    with stack.ComposeLauncher(engine, s) as launcher:
        pass
    assert len(_downs(state)) == 1
    assert launcher.left == ["container proj-superlink-1"] and s.folder.exists()  # kept: something is still there
    assert compose_command._down(engine, s) == 1
    assert "still there: container proj-superlink-1" in capsys.readouterr().err
    (state / "left").unlink()
    launcher.stop()
    launcher.stop()  # again: the files are gone, nothing is left
    assert launcher.left == [] and not s.folder.exists()


def test_a_container_that_lands_after_compose_down_is_removed_by_its_label(fake: tuple[Engine, stack.Stack, Path]) -> None:
    """An interrupted ``compose up``: the engine finishes a create after ``compose down`` listed the project."""
    engine, s, state = fake
    stack.render(s, images.LOCAL)
    (state / "left").write_text("proj-attack-worker-0-1\n")
    assert stack.down(engine, s, grace=0) == [] and not s.folder.exists()
    assert [c for c in _calls(state) if c[0] == "rm"] == [["rm", "-f", "proj-attack-worker-0-1"]]


def test_compose_wait_is_until_no_container_runs(fake: tuple[Engine, stack.Stack, Path]) -> None:
    engine, s, state = fake
    launcher = stack.ComposeLauncher(engine, s)
    assert launcher.wait(timeout=0) == 0  # no stack: nothing runs
    stack.render(s, images.LOCAL)
    (state / "ps").write_text("superlink running 0\nregister-supernodes exited 0\n")
    assert launcher.wait(timeout=0) is None
    (state / "ps").write_text("superlink exited 0\nserverapp exited 2\nclientapp-0 exited 1\n")
    assert launcher.wait() == 1  # the first failure by service name
    (state / "ps").write_text("superlink exited 0\n")
    assert launcher.wait() == 0
    assert all(c[-4:-1] == ["ps", "--all", "--format"] for c in _calls(state))


def _downs(state: Path, grace: str = "5") -> list[list[str]]:
    return [c for c in _calls(state) if c[0] == "compose" and c[-5:] == ["down", "-v", "--remove-orphans", "-t", grace]]


def test_a_compose_start_that_fails_brings_the_stack_down(fake: tuple[Engine, stack.Stack, Path]) -> None:
    engine, s, state = fake
    (state / "up-exit").write_text("1")
    with pytest.raises(EngineError, match="exited 1"):
        stack.ComposeLauncher(engine, s, base="local", build=False, say=lambda m: None).start()
    assert any("up" in c for c in _calls(state)) and len(_downs(state, grace="0")) == 1  # it never served
    assert not s.folder.exists()  # nothing was left, so its folder went too


@pytest.mark.parametrize("error", [RuntimeError("boom"), interrupts.Interrupted(signal.SIGTERM)], ids=["error", "interrupt"])
def test_as_a_context_manager_compose_stops_on_an_exception(fake: tuple[Engine, stack.Stack, Path], error: BaseException) -> None:
    engine, s, state = fake
    stack.render(s, images.LOCAL)
    with pytest.raises(type(error)), stack.ComposeLauncher(engine, s):
        raise error
    assert len(_downs(state)) == 1 and not s.folder.exists()
