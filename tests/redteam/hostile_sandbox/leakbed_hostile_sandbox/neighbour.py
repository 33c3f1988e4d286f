"""A lane that looks for the other sandboxes: their processes (its ``/proc``, every pid it can signal, their
``/proc/<pid>/mem`` and ``/proc/<pid>/root``), their files (the markers every neighbour leaves in its own output
folder), their pipes and sockets, the host's root and the scoring sandbox's inputs. It keeps looking from a thread
while its lane lives; its findings come back as ``evidence`` with its fit.
"""

from __future__ import annotations

import errno
import os
import socket
import threading
import time
from typing import Any, ClassVar

from leakbed.plugin import Attack, AttackContext, NoParams, Outputs
from leakbed_hostile_sandbox.common import ranking, with_evidence

HOST_ONLY = ("/etc/shadow", "/etc/hostname", "/etc/hosts", "/home", "/var", "/srv", "/boot", "/work/main/leakbed",
             "/work/main/pyproject.toml")  # fmt: skip


def _kill0(pid: int) -> str:
    try:
        os.kill(pid, 0)
        return "ok"
    except OSError as err:
        return errno.errorcode.get(err.errno, str(err.errno))


def _open(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.read(16)
        return "read"
    except OSError as err:
        return errno.errorcode.get(err.errno, str(err.errno))


def _markers(own: str) -> list[str]:
    """Markers of other neighbours anywhere it can walk that a sandbox can write (and under /leakbed)."""
    found = []
    for top in ("/leakbed", "/tmp", "/dev/shm"):
        for folder, _, files in os.walk(top):
            found += [os.path.join(folder, f) for f in files if f.startswith("neighbour-marker-") and own not in f]
    return found


def look(name: str) -> dict[str, Any]:
    me = os.getpid()
    own = {int(t) for t in os.listdir("/proc/self/task")}  # its own threads answer a signal too
    others = [p for p in range(1, 1 << 15) if p not in own and _kill0(p) != "ESRCH"]
    guessed = [p for p in (*range(2, 200), *range(1000, 1200)) if p not in own]
    roots = []
    for line in open("/proc/self/mountinfo"):
        f = line.split()
        sep = f.index("-")
        if f[3] == "/" and f[sep + 1] not in ("tmpfs", "proc", "devtmpfs"):
            roots.append(f"{f[4]} <- {f[sep + 2]}:{f[3]}")
    sockets = {}
    for peer in ("hostile-neighbour", "hostile-neighbour-b"):
        if peer != name:
            c = socket.socket(socket.AF_UNIX)
            try:
                c.connect(f"\0leakbed-{peer}")
                sockets[peer] = "connected"
            except OSError as err:
                sockets[peer] = errno.errorcode.get(err.errno, str(err.errno))
            finally:
                c.close()
    scoring = [p for p in ("/leakbed/inputs/request.json", "/leakbed/inputs/given.npy") if os.path.exists(p)]
    return {
        "at": time.time(),
        "pid": me,
        "uid": os.getuid(),
        "proc": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
        "signalled": others,
        "mem": [p for p in guessed if _open(f"/proc/{p}/mem") in ("read", "EIO")],
        "root": [p for p in guessed if os.path.exists(f"/proc/{p}/root/leakbed")],
        "host_only": [p for p in HOST_ONLY if os.path.lexists(p)],
        "host_root_mounts": roots,
        "markers": _markers(name),
        "sockets": sockets,
        "scoring_inputs": scoring,
        "pipes": sum(_link(f"/proc/self/fd/{fd}").startswith("pipe:") for fd in os.listdir("/proc/self/fd")),
    }


def _link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:  # closed meanwhile
        return ""


class HostileNeighbour(Attack):
    """Leaves a marker, an abstract socket and a pipe of its own, then looks for its neighbours every round, from a
    thread between rounds, and once more in its fit."""

    name: ClassVar[str] = "hostile-neighbour"
    family = "reid"
    params = NoParams
    scorer = "reid"
    source = "leakbed's red team (tests/redteam/hostile_sandbox): looks for other sandboxes"
    threat = "hostile plugin code in its lane: every other sandbox it can name"
    _state: ClassVar[dict[str, Any]] = {}

    def _start(self) -> dict[str, Any]:
        state = self._state.setdefault(self.name, {"looks": [], "since": time.time()})
        if "thread" not in state:
            with open(f"/leakbed/out/neighbour-marker-{self.name}", "w") as f:
                f.write(self.name)
            state["pipe"] = os.pipe()
            state["socket"] = socket.socket(socket.AF_UNIX)
            state["socket"].bind(f"\0leakbed-{self.name}")
            state["socket"].listen()

            def keep_looking() -> None:
                while True:
                    state["looks"].append(look(self.name))
                    del state["looks"][:-50]
                    time.sleep(0.5)

            state["thread"] = threading.Thread(target=keep_looking, daemon=True)
            state["thread"].start()
        return state

    def on_round(self, ctx: AttackContext, snapshot: Any) -> None:
        self._start()["looks"].append(look(self.name))

    def fit(self, ctx: AttackContext) -> None:
        self.found = self._start()

    def predict(self, ctx: AttackContext) -> Outputs:
        state = self._start()
        looks = [*state["looks"], look(self.name)]
        return with_evidence(ranking(ctx, self.name), {"looks": looks, "since": state["since"], "until": time.time()})


class HostileNeighbourB(HostileNeighbour):
    """The same, under a second name: two neighbours, each looking for the other."""

    name: ClassVar[str] = "hostile-neighbour-b"
