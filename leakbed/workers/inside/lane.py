"""A lane: one attack of one prior (or the attacker's shadow training), run inside its sandbox.

``python -m workers.inside.lane --in FD --out FD``: trusted code (``workers.lane``) sends frames on one pipe and
reads the replies on the other (``workers.frames``). The first frame opens the lane: which attack, under which
output name, with which (already validated) parameters, where its inputs are (read-only) and which upstream
outputs it may read. Then, per frame: ``round`` (a shadow lane trains its ``share`` of the known users on the round's
global model and hands back their shadow updates; an attack lane runs its ``on_round`` hook), ``fit`` (``fit`` then
``predict``; the outputs go back as an ``.npz`` body), ``stop``. Everything here imports attack code: it never runs
outside a sandbox, save where the run switched the sandbox off (and says so first in its report).
"""

from __future__ import annotations

import argparse
import faulthandler
import io
import json
import logging
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from leakbed.workers.frames import FrameError, read_frame, write_frame

log = logging.getLogger("lane")
MAX_REQUEST = 1 << 20  # trusted code's frames are small: the data is in the inputs


@dataclass
class Opened:
    kind: str  # shadow | attack
    attack: str
    output: str
    params: dict[str, Any]
    inputs: Path
    folder: Path
    upstream: dict[str, Path]
    peers: dict[str, dict[str, Any]]


def _snapshot(inputs: Path, rnd: int):  # noqa: ANN202 - RoundSnapshot, imported lazily
    from leakbed.core.inputs import InputsView
    from leakbed.core.records import RoundSnapshot

    view = InputsView(inputs)
    return RoundSnapshot(rnd, view.read_global(rnd), view.read_config(rnd))


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """The outputs as ``.npz`` bytes: arrays of numbers, booleans or text only (never objects: no pickle)."""
    if not isinstance(arrays, dict) or not all(isinstance(k, str) for k in arrays):
        raise TypeError(f"predict must return a dict of named NumPy arrays, not {type(arrays).__name__}")
    checked = {}
    for key, value in arrays.items():
        arr = np.asarray(value)
        if arr.dtype.hasobject:
            raise TypeError(f"output {key!r} holds Python objects ({arr.dtype}); return numbers, booleans or text")
        checked[key] = arr
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=False, **checked)
    return buf.getvalue()


class Lane:
    def __init__(self, opened: Opened) -> None:
        self.o = opened
        self._knowledge = None

    def knowledge(self):  # noqa: ANN201 - AttackerKnowledge, loaded once
        if self._knowledge is None:
            from leakbed.core.knowledge import AttackerKnowledge

            self._knowledge = AttackerKnowledge.load(self.o.inputs)
        return self._knowledge

    def context(self):  # noqa: ANN201 - AttackContext
        from leakbed.attacks import registry
        from leakbed.attacks.contract import AttackContext
        from leakbed.core.inputs import InputsView

        params = registry.params_of(self.o.attack, self.o.params)
        return AttackContext(self.o.output, InputsView(self.o.inputs), self.knowledge(), params, self.o.folder,
                             dict(self.o.upstream), dict(self.o.peers))

    def round(self, rnd: int, share: tuple[int, int] = (0, 1)) -> bytes:
        snap = _snapshot(self.o.inputs, rnd)
        if self.o.kind == "shadow":  # its share of the known users (the pool's shadow lanes split every round)
            from leakbed.attacks.shadow import shadow_updates

            labels, vectors = shadow_updates(self.knowledge(), snap, share=share)
            return npz_bytes({"labels": np.asarray(labels), "vectors": np.asarray(vectors, np.float32)})
        from leakbed.attacks import registry

        registry.attack(self.o.attack)().on_round(self.context(), snap)
        return b""

    def fit(self) -> bytes:
        from leakbed.attacks import registry

        ctx = self.context()
        attack = registry.attack(self.o.attack)()
        attack.fit(ctx)
        return npz_bytes(attack.predict(ctx))


def _open(header: dict[str, Any]) -> Opened:
    return Opened(
        kind=str(header["kind"]),
        attack=str(header.get("attack", "")),
        output=str(header.get("output", "")),
        params=dict(header.get("params") or {}),
        inputs=Path(header["inputs"]),
        folder=Path(header["folder"]),
        upstream={str(k): Path(v) for k, v in (header.get("upstream") or {}).items()},
        peers={str(k): dict(v) for k, v in (header.get("peers") or {}).items()},
    )


def _warm(kind: str) -> None:
    """Load what torch loads on its first ``torch.func`` transform or optimizer step (torch._dynamo: about 1.7 s
    of CPU) before the first round needs it: the shadow lane trains every round."""
    if kind == "shadow":
        import torch._dynamo  # noqa: F401 - the import is the point


def serve(fd_in: int, fd_out: int) -> int:
    header, _ = read_frame(fd_in, max_body=0)
    opened = _open(json.loads(header))
    # where it runs, for whoever reads its log: the sandbox user and the lane as its own PID namespace's first process
    log.info("%s lane of %s (uid %d, pid %d)", opened.kind, opened.attack, os.getuid(), os.getpid())
    _warm(opened.kind)
    lane = Lane(opened)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    write_frame(fd_out, {"ok": True, "pid": os.getpid()})
    while True:
        try:
            raw, _ = read_frame(fd_in, max_body=MAX_REQUEST)
        except FrameError:
            return 0  # trusted code closed the pipe: the lane ends
        request = json.loads(raw)
        op = request.get("op")
        if op == "stop":
            return 0
        t0 = time.perf_counter()
        try:
            if op == "round":
                k, n = request.get("share", (0, 1))
                body = lane.round(int(request["round"]), (int(k), int(n)))
            elif op == "fit":
                body = lane.fit()
            elif op == "ping":
                body = b""
            else:
                raise ValueError(f"unknown op {op!r}")
        except Exception as err:  # the task failed: its error goes back, the lane lives on
            log.error("%s failed:\n%s", op, traceback.format_exc())
            write_frame(fd_out, {"ok": False, "error": f"{type(err).__name__}: {err}", "seconds": time.perf_counter() - t0})
            continue
        write_frame(fd_out, {"ok": True, "seconds": time.perf_counter() - t0, "pid": os.getpid()}, body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="leakbed.workers.inside.lane", description="One attack's lane, inside its sandbox.")
    parser.add_argument("--in", dest="fd_in", type=int, required=True, help="the pipe trusted code writes frames to [fd]")
    parser.add_argument("--out", dest="fd_out", type=int, required=True, help="the pipe this lane replies on [fd]")
    args = parser.parse_args(argv)
    faulthandler.enable()  # a lane killed by a fatal signal leaves its Python stack in its log
    logging.basicConfig(level=logging.INFO, format="%(asctime)s lane %(levelname)s %(message)s", stream=sys.stderr)
    return serve(args.fd_in, args.fd_out)


if __name__ == "__main__":
    sys.exit(main())
