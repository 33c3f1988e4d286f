"""The red team's own Python environment, holding the hostile plugin (``tests/redteam/hostile``) installed the normal
way, and what its tests use to run leakbed in it and watch the run.

Why an environment of its own: an attack plugin enters leakbed by being pip-installed where leakbed runs, and then
every process of that environment finds it by entry point. Installed into the project's environment, the hostile
attacks would appear in every other test's catalog and runs (pytest-xdist workers and other suites share that
environment). So the red team makes a second virtual environment whose ``site-packages`` holds one path file that
adds the project environment's ``site-packages`` (``site.addsitedir``: its own path files run too, so leakbed's
editable install and torch, Flower, Ray... are shared, not copied), re-creates the project environment's console
scripts with its own interpreter (``flwr``, ``flower-superlink``, ``flwr-simulation``, ``ray``...: the processes a
run starts by name then run in it), and ``pip install --no-deps --no-build-isolation -e tests/redteam/hostile``
into it. Runs are then ``<child>/bin/python -m leakbed.cli run ...``: every process of the run, the sandboxes
included, sees the hostile plugin; nothing outside the red team does.

Built once per test session (and shared by its xdist workers, under a lock) in pytest's temporary folder.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import site
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HOSTILE = Path(__file__).resolve().parent / "hostile"
TOKEN_ENV = "LEAKBED_REDTEAM_RUN"  # marks every trusted process of a watched run (it inherits the environment)


@dataclass(frozen=True)
class ChildEnv:
    root: Path
    cache: Path  # the declarations cache of its runs (``LEAKBED_CACHE``)

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    def env(self, home: Path, **extra: str) -> dict[str, str]:
        """The environment of a command run in it: its scripts first on PATH, its own declarations cache and HOME."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "LEAKBED_HOSTILE"))}
        env.update(PATH=f"{self.bin}{os.pathsep}{env.get('PATH', '')}", LEAKBED_CACHE=str(self.cache), HOME=str(home),
                   FLWR_TELEMETRY_ENABLED="0", FLWR_DISABLE_UPDATE_CHECK="1", **extra)  # fmt: skip
        env.pop("VIRTUAL_ENV", None)
        return env

    def run(self, argv: list[str], cwd: Path, home: Path, timeout: float, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.python), *argv], cwd=cwd, env=self.env(home, **extra), capture_output=True,
                              text=True, timeout=timeout, check=False)  # fmt: skip


def _digest() -> str:
    h = hashlib.sha256(sys.executable.encode())
    for path in sorted(HOSTILE.rglob("*")):
        if path.is_file() and "egg-info" not in str(path) and "__pycache__" not in path.parts:
            h.update(str(path.relative_to(HOSTILE)).encode() + path.read_bytes())
    return h.hexdigest()[:16]


def build(folder: Path) -> ChildEnv:
    """The environment in ``folder`` (made once; a later call with the same hostile package finds it ready)."""
    folder.mkdir(parents=True, exist_ok=True)
    root, cache = folder / "venv", folder / "declarations"
    with open(folder / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ready = root / "leakbed-redteam-ready"
        digest = _digest()
        if not (ready.exists() and ready.read_text() == digest):
            shutil.rmtree(root, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
            own = Path(subprocess.run([str(root / "bin" / "python"), "-c", "import site; print(site.getsitepackages()[0])"],
                                      check=True, capture_output=True, text=True).stdout.strip())  # fmt: skip
            lines = [f"import site; site.addsitedir({p!r})" for p in site.getsitepackages()]
            (own / "_leakbed_project_env.pth").write_text("\n".join(lines) + "\n")
            here = f"#!{sys.executable}"
            for script in Path(sys.executable).parent.iterdir():
                if script.name.startswith("python") or not script.is_file():
                    continue
                with open(script, "rb") as f:
                    first = f.readline().decode(errors="replace").rstrip("\n")
                if first == here:
                    body = script.read_text(errors="replace").split("\n", 1)[1]
                    target = root / "bin" / script.name
                    target.write_text(f"#!{root / 'bin' / 'python'}\n{body}")
                    target.chmod(0o755)
            with open("/tmp/leakbed-hostile-plugin.lock", "w") as src_lock:  # the build writes into the source tree
                fcntl.flock(src_lock, fcntl.LOCK_EX)
                subprocess.run([str(root / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                                "--no-input", "--disable-pip-version-check", "-e", str(HOSTILE)],
                               check=True, capture_output=True, text=True)  # fmt: skip
            ready.write_text(digest)
    return ChildEnv(root, cache)


# --- watching a run's processes -----------------------------------------------------------------------------------


@dataclass
class Peaks:
    """Each watched process's command line and peak resident memory (``VmHWM``), by (pid, command line)."""

    seen: dict[tuple[int, bytes], dict] = field(default_factory=dict)

    def of(self, program: str) -> int:
        """The largest peak [KiB] among the processes running ``program``: a command line whose interpreter, script or
        ``-m`` module (its first three words) is ``program`` or ends with ``/program`` (0: none seen)."""
        return max((p["hwm_kb"] for p in self.seen.values() if _runs(p["cmd"], program)), default=0)

    def commands(self) -> list[str]:
        return sorted({p["cmd"][:160] for p in self.seen.values()})


def _runs(cmd: str, program: str) -> bool:
    return any(word == program or word.endswith(f"/{program}") for word in cmd.split()[:3])


class Watch(threading.Thread):
    """Polls ``/proc`` for the processes whose environment carries ``TOKEN_ENV=token`` (every trusted process a run
    starts inherits it; sandboxes scrub it) and keeps each one's peak RSS, until stopped."""

    def __init__(self, token: str, every: float = 0.2) -> None:
        super().__init__(daemon=True, name="redteam-watch")
        self.needle = f"{TOKEN_ENV}={token}".encode()
        self.every = every
        self.peaks = Peaks()
        self._halt = threading.Event()
        self._other: dict[int, bytes] = {}  # pid -> its command line when its environment did not match (re-read on exec)

    def _sample(self) -> None:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            try:
                raw = Path(f"/proc/{pid}/cmdline").read_bytes()  # changes on exec (a fork shows its parent's until then)
                key = (pid, raw)  # one record per program a pid runs: VmHWM starts afresh on exec
                if key not in self.peaks.seen:
                    if self._other.get(pid) == raw:
                        continue
                    if self.needle not in Path(f"/proc/{pid}/environ").read_bytes():
                        self._other[pid] = raw
                        continue
                    self.peaks.seen[key] = {"cmd": raw.replace(b"\0", b" ").decode(errors="replace"), "hwm_kb": 0}
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        self.peaks.seen[key]["hwm_kb"] = max(self.peaks.seen[key]["hwm_kb"], int(line.split()[1]))
            except OSError:
                continue

    def run(self) -> None:
        while not self._halt.is_set():
            self._sample()
            time.sleep(self.every)

    def stop(self) -> Peaks:
        self._halt.set()
        self.join(timeout=10)
        return self.peaks
