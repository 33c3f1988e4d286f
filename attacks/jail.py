"""A jail for the attack workers the pool spawns on this host: the store root and nothing of the run.

Threat model (DESIGN.md, "the boundary is physical"): an attack module runs inside a worker and
may try anything a process can. A worker the pool spawns locally therefore starts in new Linux
mount and PID namespaces (``unshare``; a user namespace too when not root) whose file system is a
fresh tmpfs holding only:

* read-only: the operating system (``/usr``, ``/lib*``, ``/bin``, ``/etc``), the Python install
  and virtual environment, and the code of ``attacks`` and ``core`` (so ``referee``, ``server``,
  ``leakbed``, the configs, the data and every run folder simply do not exist in there);
* read-write: the run's attack store root (``<run>/attack-store``), which is also its working
  directory, and an empty ``/tmp``;
* its own ``/proc`` (it sees no other process: not the server, its command line or environment).

It gets a scrubbed environment and a command line naming only its port and store. In containers
the same boundary is the worker's own volume (``docker-compose.yml``). Where namespaces are
unavailable, ``attack.sandbox = "auto"`` runs workers unjailed and the run's metrics say so.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc", "/sys")
# the only variables a worker inherits; everything else (paths, seeds, tokens of the run) stays out
ENV_KEEP = ("PATH", "LANG", "LC_ALL", "TZ", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
            "NVIDIA_VISIBLE_DEVICES", "GRPC_ENABLE_FORK_SUPPORT", "FLWR_TELEMETRY_ENABLED", "PYTHONHASHSEED")
_PR_SET_PDEATHSIG = 1


def code_root() -> Path:
    """The folder holding a complete copy of the ``attacks`` and ``core`` packages this process
    runs: the one with the compiled service code (an app bundle installed by ``flwr run`` may
    lack those build outputs while the process found them in the project's own install)."""
    from attacks.transport import pb

    return Path(pb.__file__).resolve().parents[1]


def read_only_paths() -> list[str]:
    """What a worker needs to run: the OS, the Python install, the venv, and the attack-side code."""
    code = [str(code_root() / "attacks"), str(code_root() / "core")]
    python = {str(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    return [p for p in (*SYSTEM_DIRS, *sorted(python), *code) if os.path.exists(p)]


def _unshare_argv() -> list[str]:
    argv = ["unshare", "--mount", "--pid", "--fork", "--kill-child=SIGKILL", "--propagation", "private"]
    if os.geteuid() != 0:
        argv[1:1] = ["--user", "--map-root-user"]
    return argv


@functools.cache
def available() -> str:
    """'' when jailed workers can start here, else why not (one line)."""
    if sys.platform != "linux" or shutil.which("unshare") is None or shutil.which("mount") is None:
        return "needs Linux with util-linux's unshare and mount"
    probe = subprocess.run([*_unshare_argv(), "mount", "-t", "tmpfs", "tmpfs", tempfile.gettempdir()],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return f"unshare failed here: {(probe.stderr or probe.stdout).strip().splitlines()[-1:] or probe.returncode}"
    return ""


def jailed(worker_argv: list[str], store_root: Path, files: list[str] = ()) -> list[str]:
    """The command that starts ``python -m attacks.worker ...`` (``worker_argv`` without the
    interpreter) inside a jail seeing ``store_root`` and nothing else of the run (plus ``files``,
    read-only: a worker's TLS certificate and key)."""
    code = code_root()  # the spawner's own copy of the code (an installed app bundle, a checkout, a venv)
    entry = f"import sys; sys.path.insert(0, {str(code)!r}); from attacks.jail import main; sys.exit(main())"
    argv = [*_unshare_argv(), sys.executable, "-c", entry, "--store", str(store_root.resolve()), "--code-root", str(code)]
    for path in [*read_only_paths(), *(str(Path(f).resolve()) for f in files)]:
        argv += ["--read-only", path]
    return [*argv, "--", *worker_argv]


def die_with_parent() -> None:
    """``preexec_fn``: the jail's ``unshare`` ends (and takes its worker along) when its spawner dies.

    SIGKILL, because ``unshare --fork`` ignores SIGTERM and SIGINT while it waits for its child;
    its ``--kill-child=SIGKILL`` then ends the worker (PID 1 of its namespace, which would ignore a
    SIGTERM arriving before its handler is installed)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


def _bind(src: str, root: Path, *, read_only: bool) -> None:
    target = root / src.lstrip("/")
    if Path(src).is_dir():
        target.mkdir(parents=True, exist_ok=True)
    else:  # a single file (a certificate): bind it onto an empty file of the same name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch()
    _mount("--rbind", src, str(target))
    if read_only:  # best effort: some mounts cannot be remounted read-only inside a user namespace
        subprocess.run(["mount", "-o", "remount,bind,ro", str(target)], capture_output=True)


def build_root(store: str, read_only: list[str]) -> Path:
    """Inside the new namespaces: a tmpfs root with only the allowed paths, /dev, /tmp and a new /proc."""
    root = Path(tempfile.mkdtemp(prefix="leakbed-jail-"))
    _mount("-t", "tmpfs", "-o", "mode=755", "tmpfs", str(root))
    _bind("/dev", root, read_only=False)
    for sub, fs in (("proc", "proc"), ("tmp", "tmpfs"), ("dev/shm", "tmpfs")):
        (root / sub).mkdir(parents=True, exist_ok=True)
        _mount("-t", fs, fs, str(root / sub))
    for path in read_only:  # after /tmp: a venv or store under /tmp must stay visible
        _bind(path, root, read_only=True)
    _bind(store, root, read_only=False)
    return root


def main(argv: list[str] | None = None) -> int:
    """``--store S --read-only P ... -- -m attacks.worker ...``, run by unshare (see ``jailed``)."""
    parser = argparse.ArgumentParser(prog="attacks.jail")
    parser.add_argument("--store", required=True)
    parser.add_argument("--code-root", required=True)
    parser.add_argument("--read-only", action="append", default=[])
    parser.add_argument("worker", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    worker = args.worker[1:] if args.worker[:1] == ["--"] else args.worker
    root = build_root(args.store, args.read_only)
    os.chroot(root)
    os.chdir(args.store)
    env = {k: os.environ[k] for k in ENV_KEEP if k in os.environ}
    env |= {"HOME": "/tmp", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "MPLCONFIGDIR": "/tmp"}
    # the attack-side code is found where the spawner had it (mounted there), whatever else is installed
    env["PYTHONPATH"] = args.code_root
    os.execve(sys.executable, [sys.executable, *worker], env)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
