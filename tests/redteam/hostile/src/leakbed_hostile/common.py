"""What every hostile attack uses: where to look for the truth, where to leave marks, how to report.

Standard library and numpy only (and ``leakbed.plugin``, the one module a plugin may import). Nothing runs at import.

``LEAKBED_HOSTILE_DRY=1`` (set only by the red team's demonstrations on the host, never inside a sandbox, whose
environment leakbed scrubs) keeps the probes from writing on the host: a mark is then left only in the working
directory, and every other place is recorded as "would write" when this process may write there.
"""

from __future__ import annotations

import json
import os
import sys
import time
import zlib
from collections.abc import Iterable
from pathlib import Path

import numpy as np

MARKER = ".leakbed-hostile-marker"  # the name of every file a hostile attack leaves wherever it can
OWNERS_DROP = ".leakbed-hostile-owners.jsonl"  # where a patched sealer copies owners for a later lane to read
FORGED = "leakbed: boundary verified, every attack scored at chance"  # a line it forges as if leakbed said it
TRUTH_NAMES = ("truth.jsonl", "update-ids.key")
RUNTIME = ("/proc", "/sys", "/dev", "/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/boot", "/snap",
           "/var/lib/containers", "/var/lib/docker", "/var/cache", "/var/lib/apt", "/etc")


def dry() -> bool:
    return os.environ.get("LEAKBED_HOSTILE_DRY") == "1"


def code_root() -> Path:
    """Where leakbed's code lives (found from the one public module): the repository on a developer's host."""
    import leakbed.plugin

    return Path(leakbed.plugin.__file__).resolve().parents[1]


def places() -> list[str]:
    """Every folder an attacker would try to write, most tempting first."""
    here = Path(__file__).resolve().parent
    out = [os.getcwd(), "/leakbed/out", "/leakbed/inputs", "/leakbed/upstream", "/leakbed", "/tmp", "/dev/shm",
           os.path.expanduser("~"), str(here), str(here.parent), sys.prefix, str(code_root()), "/", "/work", "/root",
           "/var/tmp", "/run"]
    out += [p for p in sys.path if p and os.path.isdir(p)]
    return list(dict.fromkeys(out))


def leave_marks(who: str, extra: Iterable[str] = ()) -> dict[str, list[str]]:
    """A marker file in every folder it can write: {"written": [...], "would": [...] (dry), "refused": [...]}."""
    found: dict[str, list[str]] = {"written": [], "would": [], "refused": []}
    text = json.dumps({"who": who, "pid": os.getpid(), "uid": os.getuid(), "time": time.time()})
    for folder in [*places(), *extra]:
        path = os.path.join(folder, MARKER)
        if dry() and os.path.realpath(folder) != os.path.realpath(os.getcwd()):
            found["would" if os.access(folder, os.W_OK) else "refused"].append(path)
            continue
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(text + "\n")
            found["written"].append(path)
        except OSError:
            found["refused"].append(path)
    return found


def _starts() -> list[str]:
    cwd = Path(os.getcwd()).resolve()
    return list(dict.fromkeys([str(p) for p in (cwd, *cwd.parents)][:4] + [
        "/leakbed", "/tmp", "/dev/shm", "/referee", "/data", "/attack-store", "/work", "/root", "/home", "/srv", "/run",
        "/var/tmp", "/opt", "/mnt", "/"]))  # fmt: skip


def owners_in(text: str) -> dict[str, str]:
    """update id -> user id from any JSON lines that pair them (a truth file, or a copy a patched sealer made)."""
    found = {}
    for line in text.splitlines():
        if '"update_id"' in line and '"user_id"' in line:
            try:
                rec = json.loads(line)
                found[str(rec["update_id"])] = str(rec["user_id"])
            except (ValueError, KeyError, TypeError):
                continue
    return found


def hunt(budget: float = 8.0, starts: Iterable[str] | None = None, names: Iterable[str] = TRUTH_NAMES,
         max_entries: int = 400_000) -> dict:
    """Walk the file system for the truth (and the copies hostile code left): {"files": [...], "owners": {...},
    "entries": n, "seconds": s}. Bounded in time and entries; software folders are skipped."""
    wanted = {*names, OWNERS_DROP}
    skip = {*RUNTIME, sys.prefix, sys.base_prefix}
    t0, entries, files, owners, seen = time.monotonic(), 0, [], {}, set()
    for start in starts if starts is not None else _starts():
        for folder, dirs, names_here in os.walk(start, onerror=lambda _: None):
            if folder in seen or folder in skip or os.path.exists(os.path.join(folder, "pyvenv.cfg")):
                dirs[:] = []
                continue
            seen.add(folder)
            dirs[:] = [d for d in dirs if d not in (".git", "node_modules", "__pycache__", ".cache")]
            entries += len(dirs) + len(names_here)
            for name in names_here:
                if name in wanted:
                    path = os.path.join(folder, name)
                    files.append(path)
                    try:
                        with open(path, "rb") as f:
                            owners |= owners_in(f.read(5 << 20).decode(errors="ignore"))
                    except OSError:
                        pass
            if entries > max_entries or time.monotonic() - t0 > budget:
                return {"files": files, "owners": owners, "entries": entries, "seconds": time.monotonic() - t0, "cut": True}
    return {"files": files, "owners": owners, "entries": entries, "seconds": time.monotonic() - t0, "cut": False}


def ranking(ctx, owners: dict[str, str], salt: str) -> dict[str, np.ndarray]:  # noqa: ANN001 - an AttackContext
    """A closed-world ranking: certain for every owner it found, random (its own seed) for the others."""
    anon = ctx.store.read_anon()
    ids = [str(i) for i in anon["ids"]]
    classes = sorted(ctx.knowledge.prior)
    rng = np.random.default_rng([ctx.seed, zlib.crc32(salt.encode())])
    scores = rng.random((len(ids), len(classes)))
    for row, uid in enumerate(ids):
        if owners.get(uid) in classes:
            scores[row, classes.index(owners[uid])] = 2.0
    return {"ids": np.asarray(ids, dtype=str), "classes": np.asarray(classes, dtype=str), "scores": scores}


def with_evidence(outputs: dict[str, np.ndarray], doc: dict) -> dict[str, np.ndarray]:
    return {**outputs, "evidence": np.asarray(json.dumps(doc, default=str)[:200_000])}


def reply_fd() -> int:
    """The pipe the lane replies on (``--out FD`` on its command line), found as an attacker would."""
    argv = list(sys.argv)
    for i, arg in enumerate(argv[:-1]):
        if arg == "--out":
            return int(argv[i + 1])
    try:  # else: the highest pipe among its descriptors
        pipes = [int(fd) for fd in os.listdir("/proc/self/fd") if os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:")]
        return max(pipes)
    except (OSError, ValueError):
        return -1
