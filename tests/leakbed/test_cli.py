"""The CLI on Typer: the same commands and options as the argparse CLI before it, each option's help with its unit,
bounds as click ranges whose refusals are one line and exit 2, and the commands it prints working as printed."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

from leakbed import cli, console
from leakbed.commands import compose as compose_command
from leakbed.commands import experiment, sandbox
from leakbed.core.config import ConfigError

# every command and its arguments (<positional>) and options, as the argparse CLI had them (and init, plugins, added since)
TREE = {
    "run": "<config> --set --out --ray-address --noise-from",
    "validate": "<config> --set",
    "init": "<name> --out --list",
    "sweep": "<config> --grid --set --out --ray-address",
    "attack-worker": "--port --socket --store --host --ssl-certfile --ssl-keyfile --ssl-ca-certfile --insecure --sandbox "
    "--memory-mb --log-dir --warm",
    "sandbox-run": "--store --memory-mb --processes --file-size-mb <command>",
    "plugins": "--json",
    "deploy-local": "<config> --set --out --supernodes --workers --metrics-port --hold",
    "open-world-sweep": "<config> --set --seen --prior --out",
    "feature-inference": "<config> --set --out",
    "analyze": "<analysis> <run_dir> --prior --ranges --sizes --every --set-sizes --epochs",
    "report": "<run_dir>",
    "compose": "<action> --tls --base --gpu --no-build --plugin --project --ports --engine --supernodes --workers --file "
    "--write",
}


def _names(cmd: click.Command) -> set[str]:
    return {p.opts[0] if isinstance(p, click.Option) else f"<{p.name}>" for p in cmd.params}


def test_every_command_and_option_of_the_argparse_cli_is_there() -> None:
    group = cli.command()
    assert list(group.commands) == list(TREE)  # the same names, in the same order
    for name, expected in TREE.items():
        assert _names(group.commands[name]) == set(expected.split()), name


def test_every_argument_and_option_says_what_it_is_with_its_unit() -> None:
    for name, cmd in cli.command().commands.items():
        assert cmd.help, name
        for param in cmd.params:
            text = getattr(param, "help", None) or ""
            assert text.rstrip().endswith("]") and "[" in text, f"leakbed {name} {param.name}: {text!r} states no [unit]"


def test_the_cli_defaults_are_the_sandbox_and_compose_ones() -> None:
    from leakbed import compose
    from leakbed.workers.sandbox import Limits

    limits = Limits()
    assert (sandbox.MEMORY_MB, sandbox.PROCESSES, sandbox.FILE_SIZE_MB) == (
        limits.memory_mb, limits.processes, limits.file_size_mb
    )  # fmt: skip
    group = cli.command()
    bounds = {p.name: p.type for p in group.commands["compose"].params}
    assert (bounds["supernodes"].min, bounds["supernodes"].max) == (1, compose.MAX_SUPERNODES)
    assert (bounds["workers"].min, bounds["workers"].max) == (1, compose.MAX_WORKERS)
    defaults = {p.name: p.default for p in group.commands["compose"].params}
    assert (defaults["supernodes"], defaults["workers"]) == (compose.DEFAULT_SUPERNODES, compose.DEFAULT_WORKERS)
    assert set(compose_command.FILES) == set(compose.FILES.values())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["sandbox-run", "--store", ".", "--processes", "8", "--", "true"], "--processes must be 16..1048576, got 8"),
        (["sandbox-run", "--store", ".", "--file-size-mb", "0", "--", "true"], "--file-size-mb must be at least 1, got 0"),
        (["deploy-local", "--hold", "-1"], "--hold must be 0..86400, got -1.0"),
        (["deploy-local", "--metrics-port", "70000"], "--metrics-port must be 0..65535, got 70000"),
        (["deploy-local", "--workers", "0"], "--workers must be 1..64, got 0"),
        (["analyze", "progress", ".", "--every", "0"], "--every must be at least 1, got 0"),
        (["analyze", "nope", "."], "ANALYSIS must be layers, progress, prior-size, train-size or raw-vs-update, got 'nope'"),
        (["attack-worker", "--store", ".", "--port", "0"], "--port must be 1..65535, got 0"),
        (["attack-worker", "--store", ".", "--socket", "s", "--sandbox", "x"], "--sandbox must be auto, on or off, got 'x'"),
        (["attack-worker", "--store", "."], "give one of --port or --socket"),
        (["attack-worker", "--store", ".", "--port", "5", "--socket", "s"], "--port and --socket exclude each other"),
        (["open-world-sweep", "--prior", "profile"], "--prior must be chrono or random, got 'profile'"),
        (["run", "--ranges", "3"], "No such option '--ranges'"),
        (["rnu"], "No such command 'rnu'. Did you mean 'run'?"),
        ([], "Missing command"),
        (["sandbox-run"], "Missing option '--store'"),
        (["report", "a", "b"], "Got unexpected extra argument (b)"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(argv, message, capsys) -> None:
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert err.splitlines() == [f"leakbed: error: {message}"] and out == ""


def test_help_is_plain_text_and_exit_0(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {name} " in out for name in TREE)
    assert cli.main(["sandbox-run", "-h"]) == 0
    out = capsys.readouterr().out
    assert "RLIMIT_DATA: heap and anonymous mappings [MiB] [default: 8192; 64<=x<=1048576]" in " ".join(out.split())
    assert "\\[" not in out
    assert out.count("[-- CMD [ARGS...]]") == 2  # the usage line and the one list of arguments


def test_attack_worker_hands_workers_remote_its_namespace(monkeypatch, tmp_path) -> None:
    from leakbed.workers import remote

    seen: list[argparse.Namespace] = []
    monkeypatch.setattr(remote, "run", lambda args: seen.append(args) or 0)
    assert cli.main(["attack-worker", "--port", "7000", "--store", str(tmp_path), "--insecure"]) == 0
    parser = argparse.ArgumentParser()
    remote.add_arguments(parser)  # python -m workers.remote's own options: the same namespace
    assert vars(seen[0]) == vars(parser.parse_args(["--port", "7000", "--store", str(tmp_path), "--insecure"]))


def test_sandbox_run_passes_the_programs_own_options_through(monkeypatch, tmp_path) -> None:
    from leakbed.workers import sandbox as sandbox_module

    started: list = []

    class Started:
        def __init__(self, limits, mounts) -> None:  # noqa: ANN001
            started.append(limits)

        def popen(self, argv: list[str]):  # noqa: ANN202
            started.append(argv)
            return subprocess.Popen(["sh", "-c", "exit 3"])

    monkeypatch.setattr(sandbox_module, "Sandbox", Started)
    monkeypatch.setattr(sandbox_module, "available", lambda: "")
    assert cli.main(["sandbox-run", "--store", str(tmp_path), "--memory-mb", "128", "--", "python", "-c", "x", "--store"]) == 3
    assert started[0].memory_mb == 128 and started[1] == ["python", "-c", "x", "--store"]


def test_analyze_hands_its_options_to_the_analysis(monkeypatch, tmp_path, capsys) -> None:
    import leakbed.analyze

    md = tmp_path / "progress.md"
    md.write_text("### progress\n")
    calls = []
    monkeypatch.setattr(leakbed.analyze, "run_analysis", lambda *args: calls.append(args) or md)
    assert cli.main(["analyze", "progress", str(tmp_path), "--ranges", "4", "--sizes", "1,2", "--prior", "chrono"]) == 0
    assert calls == [("progress", str(tmp_path), "chrono", 4, "1,2", 1, None, 20)]
    assert "### progress" in capsys.readouterr().out


def test_feature_inference_is_run_with_the_reconstruction_suite(monkeypatch, tmp_path, capsys) -> None:
    seen = []
    monkeypatch.setattr(experiment, "preflight", lambda cfg: seen.append(cfg) or (_ for _ in ()).throw(ConfigError("stop")))
    assert cli.main(["feature-inference", "--set", "fl.rounds=1", "--out", str(tmp_path / "o")]) == 2
    assert seen[0].attack.suite == ["feature-inference", "dlg", "inverting-gradients"] and seen[0].fl.rounds == 1
    assert capsys.readouterr().err == "leakbed: error: stop\n"


# --- built-in configs: by name, and an editable copy (leakbed init) ---------------------------------------------------


def test_init_lists_writes_a_copy_and_never_overwrites(capsys, monkeypatch, tmp_path) -> None:
    from leakbed.package_data import CONFIGS, config_names

    monkeypatch.chdir(tmp_path)
    assert cli.main(["init", "--list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == config_names() and len(listed) >= 20
    assert next(line for line in listed if line.startswith("quickstart ")).split(None, 1)[1].startswith("The quickstart")
    assert not list(tmp_path.iterdir())  # --list writes nothing
    assert cli.main(["init"]) == 0  # the quickstart, as ./quickstart.toml
    assert (tmp_path / "quickstart.toml").read_bytes() == (CONFIGS / "quickstart.toml").read_bytes()
    assert "leakbed run ./quickstart.toml" in capsys.readouterr().err
    (tmp_path / "quickstart.toml").write_text("# mine\n")
    assert cli.main(["init", "quickstart"]) == 2
    assert capsys.readouterr().err == "leakbed: error: quickstart.toml: exists; refusing to overwrite it (--out another path)\n"
    assert (tmp_path / "quickstart.toml").read_text() == "# mine\n"
    assert cli.main(["init", "nope"]) == 2
    assert capsys.readouterr().err.startswith("leakbed: error: nope: no built-in config of that name (one of active-property, ")
    assert cli.main(["init", "sweep-synthetic.toml", "--out", "mine/s.toml"]) == 2  # no such folder: nothing written
    assert capsys.readouterr().err == "leakbed: error: --out mine/s.toml: no such folder mine\n"
    assert cli.main(["init", "sweep-synthetic", "--out", "s.toml"]) == 0
    assert "leakbed sweep ./s.toml" in capsys.readouterr().err


def test_a_copied_sweep_finds_its_built_in_base_and_its_points_are_the_originals(tmp_path) -> None:
    """``leakbed init sweep-synthetic`` copies the sweep file alone: its ``config = "quickstart.toml"`` is not beside
    it, so the built-in config of that name is its base, as for the original."""
    from leakbed.package_data import CONFIGS
    from leakbed.sweep import grid_points, read_sweep_file

    (tmp_path / "s.toml").write_bytes((CONFIGS / "sweep-synthetic.toml").read_bytes())
    copy, original = read_sweep_file(tmp_path / "s.toml"), read_sweep_file(CONFIGS / "sweep-synthetic.toml")
    assert copy == original and copy[0]["name"] == "quickstart"
    assert list(grid_points(*copy[:2], None, copy[2])) == list(grid_points(*original[:2], None, original[2]))
    (tmp_path / "quickstart.toml").write_text('name = "mine"\n')  # one beside it comes first
    assert read_sweep_file(tmp_path / "s.toml")[0] == {"name": "mine"}


def test_a_config_argument_is_a_path_first_then_a_built_in_name(monkeypatch, tmp_path) -> None:
    from leakbed.core.config import ConfigError
    from leakbed.package_data import CONFIGS, config_file

    monkeypatch.chdir(tmp_path)
    assert config_file(None) is None and config_file("") is None
    assert config_file("quickstart") == config_file("quickstart.toml") == CONFIGS / "quickstart.toml"
    (tmp_path / "quickstart").write_text('name = "here"\n')  # a file of that name here wins
    assert config_file("quickstart") == Path("quickstart")
    for bad in ("nope", "sub/quickstart.toml", "./quickstart.toml"):
        with pytest.raises(ConfigError, match="no such config file, and no built-in config of that name"):
            config_file(bad)


def test_run_and_validate_take_a_built_in_config_by_name(capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["validate", "iid-control", "--set", "fl.rounds=2"]) == 0
    frozen = capsys.readouterr().out
    assert 'name = "iid-control"' in frozen and "rounds = 2" in frozen
    assert cli.main(["run", "no-such-config"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("leakbed: error: no-such-config: no such config file") and err.count("\n") == 1
    assert not (tmp_path / "runs").exists()  # refused before anything was written


# --- commands printed for the user -----------------------------------------------------------------------------------


def test_a_script_is_shown_beside_this_python_relative_to_here(monkeypatch, tmp_path) -> None:
    bin_dir = Path(sys.executable).parent
    monkeypatch.chdir(bin_dir.parent)
    assert console.script("flwr") == f"{bin_dir.name}/flwr"
    monkeypatch.chdir(bin_dir)
    assert console.script("flwr") == "./flwr"
    monkeypatch.chdir(tmp_path)
    assert console.script("flwr") == str(bin_dir / "flwr")  # outside the working directory: absolute
    assert console.script("no-such-script-anywhere") == "no-such-script-anywhere"
    assert console.shown_path(tmp_path) == "." and console.shown_path(tmp_path / "a b" / "c") == "a b/c"
    assert console.command(console.shown_path(tmp_path / "a b")) == "'./a b'"


def _printed(lines: list[str], label: str) -> list[str]:
    """The words of the command printed after ``label``, environment assignments left out."""
    line = next(x for x in lines if x.startswith(label))
    words = shlex.split(line.removeprefix(label))
    return [w for w in words if "=" not in w.split("/")[0] or w.startswith("-")]


def _works(words: list[str], cwd: Path) -> None:
    """The printed program exists where printed (from ``cwd``) and answers ``--help``."""
    program = words[0]
    assert "/" in program, f"{program} would be looked up on PATH, where a fresh checkout's venv is not"
    path = cwd / program
    assert path.is_file() and os.access(path, os.X_OK), path
    done = subprocess.run([program, "--help"], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_printed_flwr_run_works_as_printed(capsys, monkeypatch, tmp_path) -> None:
    """``leakbed compose`` prints ``flwr run``: this environment's flwr (no activated venv needed) and leakbed's Flower
    app folder (written by leakbed, naming the installed components: no checkout needed), from where the user ran
    leakbed."""
    from leakbed import stack

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(stack, "WORK", Path(".leakbed/compose"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # as a shell without the venv activated
    assert cli.main(["compose", "--supernodes", "2", "--workers", "1"]) == 0
    lines = capsys.readouterr().err.splitlines()
    words = _printed(lines, "start a run: ")
    assert words[1:4] == ["run", ".leakbed/compose/app", "leakbed-compose"] and words[0].endswith("/flwr")
    app = (tmp_path / words[2] / "pyproject.toml").read_text()
    assert 'serverapp = "leakbed.apps:server_app"' in app and 'clientapp = "leakbed.client.app:app"' in app
    _works(words, tmp_path)


def test_compose_up_prints_commands_that_work_as_printed(capsys, monkeypatch, tmp_path) -> None:
    from leakbed import stack
    from leakbed.engine import Engine, compose_binary

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(stack, "WORK", tmp_path / ".leakbed" / "compose")
    shipped = compose_binary()
    engine = Engine("podman", "podman", shipped or ("docker", "compose"), {"DOCKER_HOST": "unix:///run/x.sock"})
    the_stack = stack.Stack("proj", 2, 1, False)
    compose_command._started(engine, the_stack)
    lines = capsys.readouterr().err.splitlines()
    run = _printed(lines, "start a run:  ")
    assert run[1:4] == ["run", ".leakbed/compose/app", "leakbed-compose"]
    assert lines[1].startswith("start a run:  FLWR_HOME=.leakbed/compose/proj/flwr ")
    _works(run, tmp_path)
    _works(_printed(lines, "stop and remove everything: ")[:1], tmp_path)
    # Podman's CLI copies out of the volume without its API service, which ends itself when idle (engine.PODMAN_IDLE_S)
    assert _printed(lines, "the run folder: ") == ["podman", "cp", "proj-serverapp-1:/data/runs", "./runs/compose"]
    docker = Engine("docker", "docker", shipped or ("docker", "compose"))
    compose_command._started(docker, the_stack)
    copy = _printed(capsys.readouterr().err.splitlines(), "the run folder: ")
    assert copy[-5:] == ["-p", "proj", "cp", "serverapp:/data/runs", "./runs/compose"]
    assert copy[:-5] == [console.shown_path(shipped[0])] if shipped else ["docker", "compose"]


def test_a_mistyped_config_key_is_refused_with_the_closest_one(capsys) -> None:
    assert cli.main(["validate", "--set", "fl.rouns=3"]) == 2
    assert capsys.readouterr().err == "leakbed: error: fl.rouns: Extra inputs are not permitted; did you mean 'rounds'? (got 3)\n"


def test_dash_h_is_help_after_the_reference_page_read_the_commands(capsys) -> None:
    """The CLI reference page makes each command's context without the group's; ``-h`` must stay help afterwards."""
    from leakbed.reference import cli_page

    cli_page.page()
    assert cli.main(["sandbox-run", "-h"]) == 0
    assert "--store" in capsys.readouterr().out
