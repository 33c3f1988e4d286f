"""The wheel is the product: built from the checkout, installed non-editable into a fresh environment, it runs an
experiment from an empty folder, with a plugin package installed beside it.

The fresh environment reuses the project environment's dependencies without downloading anything: its
``site-packages`` holds one path file naming the project's ``site-packages`` as a plain path (so that folder's own
path files never run: leakbed's editable finder and the editable plugins stay out), the project's console scripts
re-created with its own interpreter (``flwr``, ``flower-superlink``, ``ray``...: the processes a run starts by name
run in it), and PATH holds nothing else of the project. Then ``import leakbed`` can only find the wheel's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow  # a real simulation from the installed wheel
PLUGIN = REPO / "examples" / "leakbed-example-plugin"
# the quickstart scaled down to about a minute on two cores: 10 users, 3 rounds of 5 devices, one prior
SMALL = [
    "data.synthetic.users=10",
    "data.synthetic.examples_per_user=40",
    "fl.rounds=3",
    "fl.fraction_train=0.5",
    'split.priors=["random"]',
    'attack.suite=["svm", "bias-labels"]',  # bias-labels: the example plugin, installed beside the wheel
    "simulation.client_cpus=2",  # one ClientApp actor on the suite's 2 cores (no number depends on it)
]


@dataclass(frozen=True)
class Fresh:
    root: Path
    home: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    def run(self, *argv: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """A command of the fresh environment as a user runs it there: its scripts first on PATH, nothing of the
        project's environment or checkout on it, no PYTHONPATH."""
        keep = ("LANG", "LC_ALL", "TMPDIR", "GRPC_ENABLE_FORK_SUPPORT")
        env = {k: os.environ[k] for k in keep if k in os.environ}
        env |= {"PATH": f"{self.bin}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(self.home),
                "LEAKBED_CACHE": str(self.home / "cache"), "FLWR_TELEMETRY_ENABLED": "0",
                "FLWR_DISABLE_UPDATE_CHECK": "1"}  # fmt: skip
        return subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def _build_wheel(out: Path) -> Path:
    """``pip wheel`` of a copy of the project's sources (the build writes its ``build/`` there, never in the checkout)."""
    src = out / "src"
    src.mkdir(parents=True)
    shutil.copy(REPO / "pyproject.toml", src)
    shutil.copytree(REPO / "leakbed", src / "leakbed", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(out)]
    done = subprocess.run([*argv, str(src)], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = out.glob("leakbed-*.whl")
    return wheel


def _fresh_env(root: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    own = root / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    (own / "_project_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")  # a plain path: no .pth of it runs
    here = f"#!{sys.executable}"
    for script in Path(sys.executable).parent.iterdir():
        if script.name.startswith(("python", "leakbed")) or not script.is_file():
            continue
        with open(script, "rb") as f:
            if f.readline().decode(errors="replace").rstrip("\n") != here:
                continue
        target = root / "bin" / script.name
        target.write_text(f"#!{root / 'bin' / 'python'}\n{script.read_text(errors='replace').split(chr(10), 1)[1]}")
        target.chmod(0o755)


def _install(fresh: Fresh, what: str | Path, cwd: Path) -> None:
    """``pip install`` into the fresh environment from local files only; ``--ignore-installed`` so that pip neither
    takes the project environment's editable leakbed for this one nor touches it."""
    done = fresh.run(str(fresh.bin / "python"), "-m", "pip", "install", "--no-deps", "--no-index", "--no-build-isolation",
                     "--ignore-installed", "--disable-pip-version-check", "-q", str(what), cwd=cwd, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Fresh]:
    base = tmp_path_factory.mktemp("wheel")
    wheel = _build_wheel(base / "dist")
    fresh = Fresh(base / "venv", base / "home")
    fresh.home.mkdir()
    _fresh_env(fresh.root)
    _install(fresh, wheel, base)
    plugin = base / "plugin"  # the example plugin package, installed beside it the way a researcher installs theirs
    shutil.copytree(PLUGIN, plugin, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    _install(fresh, plugin, base)
    return wheel, fresh


def test_the_wheel_holds_one_top_level_package_and_what_a_run_needs(built) -> None:
    wheel, _ = built
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"leakbed", "leakbed-0.1.0.dist-info"}
    top_level = zipfile.ZipFile(wheel).read("leakbed-0.1.0.dist-info/top_level.txt").decode().split()
    assert top_level == ["leakbed"]
    needed = ["py.typed", "configs/quickstart.toml", "configs/sweep-synthetic.toml", "deploy/docker-compose.yml",
              "deploy/compose.tls.yml", "deploy/templates/base.yml", "deploy/docker/app.Dockerfile",
              "deploy/base/flwr.Dockerfile", "deploy/base/debian-rootfs.sh", "deploy/grafana/dashboards/leakbed.json",
              "deploy/grafana/provisioning/datasources/prometheus.yml", "deploy/prometheus/prometheus.yml",
              "deploy/seccomp/attack-worker.json", "deploy/podman/containers.conf", "deploy/certs.sh",
              "deploy/tls/register-supernodes.sh", "workers/service_pb2.py", "workers/service_pb2_grpc.py"]  # fmt: skip
    assert not [n for n in needed if f"leakbed/{n}" not in names]
    shipped = sorted(n.removeprefix("leakbed/configs/") for n in names if n.startswith("leakbed/configs/"))
    assert shipped == sorted(p.name for p in (REPO / "leakbed" / "configs").glob("*.toml"))
    assert not [n for n in names if "__pycache__" in n or "/deploy/certs/" in n or n.startswith(("tests/", "benchmarks/"))]


def test_the_fresh_environment_imports_the_wheel_and_pip_lists_one_top_level_name(built, tmp_path) -> None:
    _, fresh = built
    probe = ("import importlib.metadata as m, json, sys, leakbed, leakbed_example; "
             "dist = str(m.distribution('leakbed').locate_file('leakbed')); "
             "print(json.dumps([leakbed.__file__, dist, leakbed_example.__file__, sys.path]))")  # fmt: skip
    done = fresh.run(str(fresh.bin / "python"), "-c", probe, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    module, dist, plugin, path = json.loads(done.stdout)
    assert Path(module).is_relative_to(fresh.root) and Path(dist).is_relative_to(fresh.root)
    assert Path(plugin).is_relative_to(fresh.root)
    assert not [p for p in path if p and Path(p).resolve().is_relative_to(REPO) and ".venv" not in Path(p).parts]
    shown = fresh.run(str(fresh.bin / "python"), "-m", "pip", "show", "-f", "leakbed", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert f"Location: {fresh.root}" in shown.stdout
    files = shown.stdout.split("Files:", 1)[1].split()
    tops = {f.split("/")[0] for f in files if not f.startswith("..") and ".dist-info/" not in f}
    assert tops == {"leakbed"} and "../../../bin/leakbed" in files


def test_init_lists_and_copies_a_built_in_config_from_any_folder(built, tmp_path) -> None:
    _, fresh = built
    listed = fresh.run("leakbed", "init", "--list", cwd=tmp_path)
    assert listed.returncode == 0 and "quickstart" in listed.stdout.split(), listed.stderr
    assert fresh.run("leakbed", "init", "quickstart", cwd=tmp_path).returncode == 0
    assert (tmp_path / "quickstart.toml").read_text().startswith("# The quickstart")
    again = fresh.run("leakbed", "init", "quickstart", cwd=tmp_path)
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "refusing to overwrite" in again.stderr


def test_a_small_quickstart_runs_from_an_empty_folder_with_the_plugin(built, tmp_path) -> None:
    """``leakbed run quickstart`` by name: the built-in config from the installed package, the ServerApp and ClientApps
    from the wheel (the Flower app folder written by leakbed), the attacks in their sandboxes, the report in ./runs."""
    _, fresh = built
    empty = tmp_path / "empty"
    empty.mkdir()
    done = fresh.run("leakbed", "run", "quickstart", *[a for s in SMALL for a in ("--set", s)], cwd=empty, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    (run,) = (empty / "runs").iterdir()
    assert run.name.startswith("quickstart-") and (run / "report.md").is_file()
    assert f"report: runs/{run.name}/report.md" in done.stdout
    summary = json.loads((run / "metrics.json").read_text())
    metrics = json.loads((run / "random" / "metrics.json").read_text())  # the prior's own
    assert summary["random"]["svm"]["ap"] == metrics["attackers"]["svm"]["ap"]
    assert metrics["users"] == 10 and metrics["rounds"] == 3
    svm = metrics["attackers"]["svm"]
    assert svm["n_updates"] == 15 and svm["coverage"] == 1.0
    assert 0 < svm["chance_ap"] < svm["ap"] <= 1  # the biased users leak even at this scale (0.75 vs 0.27 here)
    assert 0.05 < metrics["utility"]["3"]["accuracy"] <= 1
    assert "bias-labels" in metrics["plugin_scored"] and metrics["plugin_scored"]["bias-labels"]["updates"] == 15
    assert summary["attack_sandbox"]["random"].startswith("sandboxed: bubblewrap")  # the wheel's code, staged
    assert "bias-labels" in (run / "report.md").read_text()
