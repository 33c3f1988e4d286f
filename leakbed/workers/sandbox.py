"""The sandbox attack code runs in, built on bubblewrap (``bwrap``): one per attack and prior (a *lane*), one per
introspection, one per check, one per plugin scorer.

Threat model (DESIGN.md, *Trust boundaries*): attack code is untrusted and may try anything a process can.
bubblewrap is the sandbox behind Flatpak: a small, audited tool that builds the namespaces, mounts and
``pivot_root`` for us, so nothing of the confinement is hand-made here. A sandbox is built from an allowlist of
what leakbed chose, never from a path that plugin data or the import system resolves (bubblewrap follows links in a
bind's source). A sandboxed command gets:

* a uid of its own with no capabilities (effective, permitted, inheritable, ambient and bounding sets empty) and
  ``no_new_privs``: as root, one leased for it alone from a reserved range (``workers.uids``); as an ordinary
  user, that user's (its sandboxes share it: the namespaces and the allowlist keep them apart);
* a root of its own (bwrap's ``pivot_root`` onto a fresh tmpfs, the old root detached) holding read-only only: the
  operating system's ``/usr`` (and the ``/bin``, ``/lib`` links into it, three files of ``/etc``), the Python
  environment's prefixes (``environment_paths``), leakbed's attack side and the attack's own distribution as
  staged copies (``workers.staging``: regular files copied by trusted code, at ``/leakbed/lib/<name>``), and
  whatever the caller mounts (``Mount``: a lane's inputs, written by trusted code, at fixed paths under
  ``/leakbed``, so no path of the run shows inside); writable: only a size-bounded tmpfs of its own (``output``:
  the attack's output folder under a disk quota, owned by its uid, mode 0700) and private, size-bounded ``/tmp``
  and ``/dev/shm``. Nothing on the host is writable, so no host folder is ever handed over (no chown) and nothing
  it leaves is on the host's disk; no host ``/proc``, ``/sys`` (save CUDA's, on CUDA), run folder or working
  directory is there;
* a minimal ``/dev`` (null, zero, random, urandom; the NVIDIA nodes only on CUDA) and its own ``/proc`` (its PID
  namespace, whose pid 1 is the command itself: ``--as-pid-1``, so bwrap's process and its command line are not
  visible, nor any other sandbox's process), whose ``sys`` is read-only;
* its own network namespace (only a loopback of its own), IPC, UTS and cgroup namespaces;
* the system-call filter of ``workers.seccomp``;
* limits (``Limits``): heap and anonymous memory (RLIMIT_DATA), processes and threads of its uid (RLIMIT_NPROC),
  file size (RLIMIT_FSIZE), open files; no core dumps;
* death with its spawner: ``--die-with-parent`` ends bwrap's process; as root the kernel does not let that signal
  reach the command, which runs as another uid, so a guard of the command's uid (``workers.guard``) kills every
  process of it when the spawner dies without ending the sandbox; a session of its own (no terminal to inject into).

It talks to trusted code only through the pipes the caller passes (``popen``'s ``pass_fds``, stdin, stdout).

As root, bwrap builds the sandbox without a user namespace and ``setpriv`` (util-linux) drops to the sandbox's uid
last (after ``chown`` gave it its output folder): a user namespace made by root maps the sandbox's uid onto host
root, which could write the host's ``/proc/sys`` (tried). Run by an ordinary user, bwrap uses an unprivileged user
namespace and the sandbox keeps that user's uid; further user namespaces are disabled.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from leakbed.core.config import ConfigError, WorkersConfig
from leakbed.workers import seccomp, uids
from leakbed.workers.guard import Guard
from leakbed.workers.guard import start as start_guard
from leakbed.workers.privileges import drop
from leakbed.workers.staging import Staged, code_paths, code_root, stage_leakbed, stage_plugins

__all__ = ["INSIDE", "LIB", "OUTPUT", "Limits", "Mount", "Sandbox", "code_paths", "code_root", "end"]
# the only variables a sandboxed process inherits; everything else (paths, seeds, tokens of the run) stays out
ENV_KEEP = ("LANG", "LC_ALL", "TZ", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
            "NVIDIA_VISIBLE_DEVICES", "GRPC_ENABLE_FORK_SUPPORT", "PYTHONHASHSEED", "PYTHONUNBUFFERED",
            "LEAKBED_OWNER")  # a random mark of the command that owns it (core.processes), so it is found and ended
DEVICES = ("null", "zero", "random", "urandom")
GPU_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
ETC_FILES = ("ld.so.cache", "alternatives", "localtime")  # the loader's cache, tool links, the time zone
PASSWD = "root:x:0:0::/:/usr/sbin/nologin\nsandbox:x:{uid}:{gid}::/tmp:/usr/sbin/nologin\n"
GROUP = "root:x:0:\nsandbox:x:{gid}:\n"
TOOLS = ("bwrap", "prlimit", "setpriv")
OWN_OUTPUT = 'chown "$0" /leakbed/out && exec "$@"'  # as root: the output folder becomes the sandbox uid's, then setpriv
MIB = 1 << 20


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandbox, so that one attack module cannot starve the federation."""

    memory_mb: int = 8192  # RLIMIT_DATA: heap and anonymous mappings (not GPU memory) [MiB]
    processes: int = 1024  # RLIMIT_NPROC: processes and threads of the sandbox user [count]
    file_size_mb: int = 16384  # RLIMIT_FSIZE: largest file it may write [MiB]
    tmp_mb: int = 1024  # size of its private /tmp and of /dev/shm, each [MiB]
    open_files: int = 4096  # RLIMIT_NOFILE [count]
    output_mb: int = 1024  # the writable output folder's tmpfs: the attack's disk quota [MiB]


def environment_paths() -> list[Path]:
    """The Python a sandbox runs, read-only: this environment's prefixes and those of the install it was made from
    (resolved: a venv's python links into its base), the environment at the path this process was started from (the
    sandbox runs ``sys.executable`` as given), and the ``site-packages`` of another environment this one is layered
    on (an entry of ``sys.path`` that is exactly ``<prefix>/lib/pythonX.Y/site-packages`` of a folder holding a
    ``pyvenv.cfg``, reached without a link: the red team's environment adds the project's so). Any other folder a
    ``.pth`` adds to ``sys.path`` (an editable plugin's source) is never mounted: the plugin's files are staged."""
    paths = {Path(os.path.realpath(p)) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    paths.add(Path(sys.executable).resolve().parents[1])
    paths.add(Path(os.path.abspath(sys.executable)).parents[1])
    paths.update(p for p in map(Path, sys.path) if _layered_site(p))
    kept = sorted(p for p in paths if p.is_dir() and p != Path("/") and p != Path("/usr") and not p.is_relative_to("/usr"))
    return [p for p in kept if not any(p != q and p.is_relative_to(q) for q in kept)]


def _layered_site(path: Path) -> bool:
    if not path.is_absolute() or path.name != "site-packages" or os.path.realpath(path) != str(path):
        return False
    lib, prefix = path.parent, path.parents[2]
    return lib.name.startswith("python") and lib.parent.name == "lib" and (prefix / "pyvenv.cfg").is_file()


def _privileged() -> bool:
    return os.geteuid() == 0


def _system_binds() -> list[str]:
    """The operating system's files a sandbox reads: ``/usr``, real ``/bin``-like folders, three files of ``/etc``."""
    out = [f"/{top}" for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
           if not os.path.islink(f"/{top}") and os.path.isdir(f"/{top}")]  # fmt: skip
    out.append("/usr")
    return out + [f"/etc/{name}" for name in ETC_FILES if os.path.lexists(f"/etc/{name}")]


INSIDE = Path("/leakbed")  # where a sandbox finds what it is given: fixed paths, nothing of the host's layout
OUTPUT = INSIDE / "out"
LIB = INSIDE / "lib"  # the staged code: /leakbed/lib/leakbed, /leakbed/lib/<distribution>


@dataclass(frozen=True)
class Mount:
    """A host file or folder the sandbox reads at ``inside`` (read-only: trusted code wrote it, none may write it)."""

    host: Path
    inside: Path


class SandboxProcess(subprocess.Popen):
    """A started sandbox (bwrap's process); holds the lease of its uid, and its guard, until it has ended."""

    lease: uids.Lease | None = None
    guard: Guard | None = None

    def poll(self) -> int | None:
        code = super().poll()
        if code is not None:
            self._ended()
        return code

    def wait(self, timeout: float | None = None) -> int:
        code = super().wait(timeout)
        self._ended()
        return code

    def _ended(self) -> None:
        """The guard first (it kills what is left of the uid, then exits), then the lease: the uid is leased again
        only once no process of it is left."""
        if self.guard is not None:
            self.guard.close()
        if self.lease is not None:
            self.lease.release()


@dataclass
class Sandbox:
    """One sandboxed command: ``mounts`` read-only, a writable output tmpfs of ``limits.output_mb`` at ``/leakbed/out``
    (also the working directory) when ``output``; the staged code of leakbed and of the attack distributions
    ``plugins`` (None: every third-party attack distribution that can be staged; ``()``: leakbed's alone)."""

    limits: Limits = field(default_factory=Limits)
    mounts: Sequence[Mount] = ()
    output: bool = True
    cuda: bool = False
    extra_env: dict[str, str] = field(default_factory=dict)
    plugins: Sequence[str] | None = None

    def __post_init__(self) -> None:
        self._fds: list[int] = []
        self._made: set[Path] = set()  # folders of the sandbox's root made or mounted so far
        self._staged: list[Staged] = []
        for m in self.mounts:
            if not m.inside.is_relative_to(INSIDE) or any(m.inside == p or m.inside.is_relative_to(p) for p in (OUTPUT, LIB)):
                raise ValueError(f"sandbox mount {m.inside}: must lie under {INSIDE}, outside {OUTPUT} and {LIB}")

    def staged(self) -> list[Staged]:
        """The code it mounts: leakbed's attack side, then its plugins' distributions (staged on first use);
        StagingError (one line) when a named one cannot be staged."""
        if not self._staged:
            self._staged = [stage_leakbed(), *stage_plugins(self.plugins)]
        return self._staged

    def allowlist(self) -> dict[Path, Path]:
        """Every host folder or file it binds, read-only, by where it shows inside: what the sandbox can see of the
        host beyond its own tmpfs folders, ``/proc`` and ``/dev``."""
        seen = {Path(p): Path(p) for p in _system_binds()}
        seen.update({p: p for p in environment_paths()})
        seen.update({LIB / s.name: s.root for s in self.staged()})
        seen.update({m.inside: m.host for m in self.mounts})
        return seen

    # --- the command -------------------------------------------------------------------------

    def argv(self, command: Sequence[str], uid: int | None = None) -> list[str]:
        """``prlimit ... bwrap ... [sh -c chown...] [setpriv ...] command``, the sandbox running as ``uid`` (as root:
        a leased one; an ordinary user's own otherwise); the files it reads are ``pass_fds``."""
        uid = os.getuid() if uid is None else uid
        self._made = {Path(p) for p in ("/", "/usr", "/etc", "/proc", "/dev", "/tmp")}
        tools = {t: shutil.which(t) or t for t in TOOLS}
        lim = self.limits
        argv = [
            tools["prlimit"],
            f"--data={lim.memory_mb * MIB}",
            f"--nproc={lim.processes}",
            f"--fsize={lim.file_size_mb * MIB}",
            f"--nofile={lim.open_files}",
            "--core=0",
            "--",
            tools["bwrap"],
            *self._namespaces(),
            *self._file_system(uid),
            *("--seccomp", str(self._fd(seccomp.bpf_program()))),
            "--",
        ]
        if _privileged():
            if self.output:
                argv += [shutil.which("sh") or "/bin/sh", "-c", OWN_OUTPUT, f"{uid}:{uid}"]
            argv += drop(uid)
        return [*argv, *command]

    def _namespaces(self) -> list[str]:
        ns = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
              "--hostname", "leakbed-sandbox", "--die-with-parent", "--new-session", "--as-pid-1"]
        if _privileged():  # no user namespace (see the module's docstring): setpriv drops what bwrap keeps for it
            kept = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", *(("CAP_CHOWN",) if self.output else ()))  # to change user
            return [*ns, "--cap-drop", "ALL", *(a for cap in kept for a in ("--cap-add", cap))]
        return [*ns, "--unshare-user", "--disable-userns", "--cap-drop", "ALL"]

    def _file_system(self, uid: int) -> list[str]:
        lim = self.limits
        gid = uid if _privileged() else os.getgid()
        fs: list[str] = []
        for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = Path("/") / top
            if host.is_symlink():
                fs += ["--symlink", os.readlink(host), str(host)]
        for path in _system_binds():
            if path == "/usr":
                fs += ["--ro-bind", "/usr", "/usr", "--perms", "0755", "--dir", "/etc"]
            else:
                fs += ["--ro-bind", path, path]
        fs += ["--ro-bind-data", str(self._fd(PASSWD.format(uid=uid, gid=gid).encode())), "/etc/passwd"]
        fs += ["--ro-bind-data", str(self._fd(GROUP.format(gid=gid).encode())), "/etc/group"]
        fs += ["--proc", "/proc", "--perms", "0755", "--tmpfs", "/dev"]
        for dev in DEVICES:
            fs += ["--dev-bind", f"/dev/{dev}", f"/dev/{dev}"]
        if self.cuda:
            fs += self._gpu()
        fs += ["--symlink", "/proc/self/fd", "/dev/fd"]
        fs += ["--perms", "1777", "--size", str(lim.tmp_mb * MIB), "--tmpfs", "/dev/shm"]
        fs += ["--perms", "1777", "--size", str(lim.tmp_mb * MIB), "--tmpfs", "/tmp"]
        for path in environment_paths():
            fs += [*self._parents(path), "--ro-bind", str(path), str(path)]
        for staged in self.staged():
            fs += [*self._parents(LIB / staged.name), "--ro-bind", str(staged.root), str(LIB / staged.name)]
        for m in self.mounts:
            fs += [*self._parents(m.inside), "--ro-bind", str(m.host), str(m.inside)]
        if self.output:  # the only writable folder: a tmpfs of its own size (the quota), its uid's alone
            fs += [*self._parents(OUTPUT), "--perms", "0700", "--size", str(lim.output_mb * MIB), "--tmpfs", str(OUTPUT)]
            fs += ["--chdir", str(OUTPUT)]
        else:
            fs += ["--chdir", "/tmp"]
        # /dev read-only too: where bwrap runs unprivileged (in a container) its tmpfs belongs to the sandbox's user
        return [*fs, "--remount-ro", "/dev", "--remount-ro", "/"]

    def _gpu(self) -> list[str]:
        """The NVIDIA device nodes and the sysfs the driver reads: only for an attack side on CUDA."""
        nodes = [f"/dev/{d}" for d in GPU_DEVICES] + sorted(str(p) for p in Path("/dev").glob("nvidia[0-9]*"))
        out = [arg for n in nodes if os.path.exists(n) for arg in ("--dev-bind", n, n)]
        return [*out, "--ro-bind", "/sys", "/sys"]

    def _parents(self, path: Path) -> list[str]:
        """Traversable (0755) folders down to ``path``: bwrap would make them 0700, closed to the sandbox user."""
        out = []
        for parent in reversed(path.parents):
            if parent not in self._made:
                out += ["--perms", "0755", "--dir", str(parent)]
                self._made.add(parent)
        return out

    def _fd(self, data: bytes) -> int:
        fd = os.memfd_create("leakbed-sandbox", 0)
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
        self._fds.append(fd)
        return fd

    def env(self, plain: bool = False) -> dict[str, str]:
        """A scrubbed environment: the attack-side code is found in its staged copies, nothing else of the run.
        ``plain``: for a process of its own where no sandbox can start (nothing is mounted: it sees what this process
        sees anyway), where the code is found where the spawner has it, with the spawner's own ``PYTHONPATH``
        (packages installed with ``--target``)."""
        keep = {k: os.environ[k] for k in ENV_KEEP if k in os.environ}
        path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"])
        if plain:
            extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
            code = [str(code_root()), *extra]
        else:
            code = [str(LIB / s.name) for s in self.staged()]
        return {
            **keep,
            "PATH": path,
            "HOME": "/tmp",
            "PYTHONPATH": os.pathsep.join(dict.fromkeys(code)),
            "PYTHONDONTWRITEBYTECODE": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "MPLCONFIGDIR": "/tmp",
            **self.extra_env,
        }

    # --- running it --------------------------------------------------------------------------

    def popen(self, command: Sequence[str], pass_fds: Sequence[int] = (), **kwargs: object) -> SandboxProcess:
        """Start ``command`` in the sandbox (``kwargs`` go to Popen: stdout, stderr, stdin; ``pass_fds`` are the
        caller's pipes, kept open at the same numbers inside); as root, under a uid leased for it alone."""
        lease = uids.lease() if _privileged() else None
        watch = None
        try:
            if lease is not None:
                watch = start_guard(lease.uid)  # before the command exists: no moment when a dead spawner leaves it
            argv = self.argv(command, lease.uid if lease is not None else None)
            proc = SandboxProcess(  # type: ignore[call-overload]
                argv, env=self.env(), pass_fds=[*self._fds, *pass_fds], close_fds=True, start_new_session=True, **kwargs
            )
        except BaseException:
            if watch is not None:
                watch.close()
            if lease is not None:
                lease.release()
            raise
        finally:
            self.close_fds()
        proc.lease, proc.guard = lease, watch
        return proc

    def close_fds(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()


def end(proc: subprocess.Popen) -> None:
    """End a sandbox at once, whatever runs in it: SIGKILL its command (pid 1 of the sandbox's PID namespace, so every
    process in it dies with it; from this namespace the signal cannot be refused), then bwrap.

    Killing bwrap alone does not reach the command when root spawned it: bwrap's own process keeps no capability and
    the command runs as another uid, so the kernel refuses the parent-death signal of ``--die-with-parent`` (tried);
    the command would run on, orphaned, until its guard's turn (``workers.guard``). A process that is not a sandbox
    (unsandboxed mode) is killed with its process group."""
    if proc.poll() is not None:
        return
    for pid in _children(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # start_new_session: bwrap (or the unsandboxed process) leads its group
    except (ProcessLookupError, PermissionError):
        proc.kill()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _children(pid: int) -> list[int]:
    """The direct children of ``pid`` (bwrap's: the sandbox's pid 1), read from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            out.append(int(entry))
    return out


def check_store(path: str | Path) -> Path:
    """The store folder, resolved; ValueError (one line) if it is missing or not a readable folder."""
    store = Path(path)
    if not store.is_dir():
        raise ConfigError(f"--store {store}: no such folder")
    if not os.access(store, os.R_OK | os.X_OK):
        raise ConfigError(f"--store {store}: not readable")
    return store.resolve()


@functools.cache
def available() -> str:
    """'' when a sandbox can start here, else why not (one line): bwrap, util-linux and libseccomp present,
    and a trial command run in exactly the sandbox a worker gets."""
    if sys.platform != "linux":
        return "needs Linux"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"{', '.join(missing)} not found (Debian: apt-get install bubblewrap util-linux)"
    try:
        seccomp.bpf_program()
    except (ImportError, OSError, AttributeError) as err:
        return f"no system-call filter: libseccomp unavailable ({type(err).__name__}: {err}; Debian: libseccomp2)"
    box = Sandbox(Limits())
    try:
        proc = box.popen([str(Path(sys.executable)), "-c", "pass"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = proc.communicate(timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not start: {exc}"
    if proc.returncode != 0:
        last = (err or out).decode(errors="replace").strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
        return f"bwrap failed here: {last[0]}"
    return ""


def limits_for(workers: WorkersConfig) -> tuple[Limits | None, str]:
    """The sandbox of attack code under a run's ``[workers]`` (None: unsandboxed) and, unsandboxed, why;
    ``workers.sandbox = 'on'`` where no sandbox can start is a ValueError (one line)."""
    if workers.sandbox == "off":
        return None, "workers.sandbox = 'off'"
    why = available()
    if why and workers.sandbox == "on":
        raise ConfigError(f"workers.sandbox = 'on' but the attack sandbox cannot start here: {why}")
    if why:
        return None, why
    lim = workers.limits
    return Limits(memory_mb=lim.memory, processes=lim.processes, file_size_mb=lim.file_size, tmp_mb=lim.tmp,
                  output_mb=lim.output), ""
