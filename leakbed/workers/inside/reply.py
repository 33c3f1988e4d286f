"""How a program of ``workers.inside`` answers trusted code: one JSON document, written whole to the pipe it was
given, never to stdout (which the plugin's own prints may fill). Trusted code reads it as hostile data
(``workers.one_shot``)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable


def send(fd: int, doc: dict) -> None:
    """Write ``doc`` to the pipe ``fd`` and close it (its end is the end of the answer)."""
    view = memoryview(json.dumps(doc, allow_nan=False).encode())
    while view:
        view = view[os.write(fd, view):]
    os.close(fd)


def answer(fd: int, work: Callable[[], dict], error_chars: int) -> int:
    """Send ``{"ok": true, **work()}``, or ``{"ok": false, "error": "Type: text"}`` (at most ``error_chars``) where
    the plugin code under ``work`` failed."""
    try:
        doc = {"ok": True, **work()}
    except Exception as err:  # noqa: BLE001 - the failure goes back as one line
        doc = {"ok": False, "error": f"{type(err).__name__}: {err}"[:error_chars]}
    send(fd, doc)
    return 0
