"""Running leakbed as an ordinary user, from a test run as root: the sandboxes' other half of the threat model.

As root, leakbed drops each sandbox to a uid of its own; an ordinary user has only its own uid, so there its
sandboxes share it and the namespaces and the allowlist carry the isolation alone. Tests run the same probes both
ways: ``Ordinary.run`` runs a command as an unprivileged user made for the tests (``useradd``), through ``setpriv
--reuid --regid --init-groups``, in a mount namespace of its own where the Python install is reachable (this
machine's Python lives under ``/root``, closed to others: a private tmpfs over the closed folder holds the install's
own folder, bound back; nothing else of it shows). Run by an ordinary user already, ``run`` is a plain subprocess.

Where that cannot be done (no ``useradd``, ``unshare``, ``setpriv``), the test is skipped with the reason; with
``CI=true`` where it should be possible (root, the tools present), it fails instead.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

USER = "leakbed-sandbox-test"
KEEP = ("FLWR_TELEMETRY_ENABLED", "FLWR_DISABLE_UPDATE_CHECK", "FLWR_LOG_LEVEL", "GRPC_ENABLE_FORK_SUPPORT", "LANG", "TZ")


def unavailable(reason: str, possible: bool) -> None:
    """Skip with ``reason``; fail instead under ``CI=true`` where it should have been possible."""
    if possible and os.environ.get("CI") == "true":
        pytest.fail(f"as an ordinary user: {reason}")
    pytest.skip(f"as an ordinary user: {reason}")


def _closed_ancestor(path: Path) -> tuple[Path, Path] | None:
    """The first folder on the way to ``path`` that others cannot traverse, and its child on that way."""
    for parent in reversed(path.parents):
        if parent != Path("/") and not os.stat(parent).st_mode & 0o001:
            return parent, parent / path.relative_to(parent).parts[0]
    return None


@dataclass(frozen=True)
class Ordinary:
    uid: int
    gid: int
    home: Path  # a folder of its own (its HOME, its leakbed cache)
    privileged: bool  # True: made by a root test run; False: the test run is this user

    def folder(self, name: str) -> Path:
        """A fresh folder the user owns, under its home."""
        path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.home))
        if self.privileged:
            os.chown(path, self.uid, self.gid)
        return path

    def give(self, path: Path) -> None:
        """Let the user read ``path`` (and write it, a folder it owns)."""
        if self.privileged:
            for p in [path, *path.rglob("*")]:
                os.lchown(p, self.uid, self.gid)

    def env(self, **extra: str) -> dict[str, str]:
        keep = {k: os.environ[k] for k in KEEP if k in os.environ}
        return {**keep, "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin", "HOME": str(self.home),
                "LEAKBED_CACHE": str(self.home / "cache"), "PYTHONDONTWRITEBYTECODE": "1", **extra}  # fmt: skip

    def argv(self, command: list[str], env: dict[str, str], cwd: Path) -> list[str]:
        if not self.privileged:
            return command
        script = []
        for i, top in enumerate(sorted({Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()})):
            closed = _closed_ancestor(top)
            if closed is None:
                continue
            ancestor, child = closed
            hold = f"/tmp/.leakbed-ordinary-{os.getpid()}-{i}"
            script += [f"mkdir -p {hold}", f"mount --bind {shlex.quote(str(child))} {hold}",
                       f"mount -t tmpfs -o mode=0755 tmpfs {shlex.quote(str(ancestor))}",
                       f"mkdir -p {shlex.quote(str(child))}", f"mount --bind {hold} {shlex.quote(str(child))}"]  # fmt: skip
        drop = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups", "--", "env", "-i",
                *(f"{k}={v}" for k, v in env.items()), *command]  # fmt: skip
        script += [f"cd {shlex.quote(str(cwd))}", "exec " + " ".join(map(shlex.quote, drop))]
        return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", " && ".join(script)]

    def run(self, command: list[str], *, cwd: Path, timeout: float, env: dict[str, str] | None = None,
            stdin: str | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
        env = env if env is not None else self.env()
        return subprocess.run(self.argv(command, env, cwd), cwd=cwd, env=env if not self.privileged else None, input=stdin,
                              capture_output=True, text=True, timeout=timeout, check=False)  # fmt: skip

    def popen(self, command: list[str], *, cwd: Path, env: dict[str, str] | None = None, **kw: object) -> subprocess.Popen:
        env = env if env is not None else self.env()
        return subprocess.Popen(self.argv(command, env, cwd), cwd=cwd, env=env if not self.privileged else None, **kw)  # type: ignore[call-overload]


def ordinary(base: Path) -> Ordinary:
    """An ordinary user to run commands as (skips, or fails under CI=true, where none can be had)."""
    if os.geteuid() != 0:
        home = Path(tempfile.mkdtemp(prefix="ordinary-", dir=base))
        return Ordinary(os.getuid(), os.getgid(), home, privileged=False)
    missing = [t for t in ("useradd", "unshare", "setpriv", "mount") if shutil.which(t) is None]
    if missing:
        unavailable(f"{', '.join(missing)} not found", possible=False)
    try:
        pw = pwd.getpwnam(USER)
    except KeyError:
        made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
                              capture_output=True, text=True, check=False)  # fmt: skip
        if made.returncode not in (0, 9):  # 9: made meanwhile by another test process
            unavailable(f"useradd failed: {made.stderr.strip()}", possible=True)
        pw = pwd.getpwnam(USER)
    root = Path(tempfile.mkdtemp(prefix="leakbed-ordinary-", dir="/tmp"))  # /tmp: pytest's own folders are root's alone
    root.chmod(0o755)
    home = root / "home"
    home.mkdir()
    os.chown(home, pw.pw_uid, pw.pw_gid)
    user = Ordinary(pw.pw_uid, pw.pw_gid, home, privileged=True)
    probe = user.run([sys.executable, "-c", "import os, leakbed.workers.sandbox; print(os.getuid())"], cwd=home, timeout=120)
    if probe.returncode != 0 or probe.stdout.strip() != str(pw.pw_uid):
        unavailable(f"cannot run Python as {USER}: {(probe.stderr or probe.stdout).strip()[-300:]}", possible=True)
    return user
