"""Sealing: the one part of the referee the server uses. The shuffler files each update's owner
here and gets the run's update-id key; nothing here reads the truth back.

The truth file is created fresh for each run: a run folder that already holds one (``flwr run``
into an old out-dir) is refused rather than appended to, so no old owner is ever scored again.
Update ids come from a random per-run key that only this folder holds: ids are opaque, and no
seed the attack side may hold regenerates them (metrics never depend on ids).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

TRUTH_FILE = "truth.jsonl"
KEY_FILE = "update-ids.key"


class TruthExists(FileExistsError):
    """The referee folder already holds a run's truth."""


class Sealer:
    """Write-only truth: (update id -> owner, round, per-update facts), appended as updates arrive."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o700)
        path = self.folder / TRUTH_FILE
        if path.exists():
            raise TruthExists(f"{path} already holds a run's truth: use a new out-dir (or delete the old run)")
        self._path = path
        self._path.touch(mode=0o600)
        self._key = os.urandom(32)
        key_path = self.folder / KEY_FILE
        key_path.write_bytes(self._key)
        os.chmod(key_path, 0o600)
        self._issued = 0

    def new_update_id(self) -> str:
        """The next opaque update id: a keyed hash of a counter under this run's secret key."""
        self._issued += 1
        return hashlib.blake2b(self._issued.to_bytes(8, "big"), key=self._key, digest_size=8).hexdigest()

    def pseudonym(self, node_id: int) -> str:
        """A node's per-run pseudonym: a keyed hash of its id under this run's secret key, stable within the
        run (the server addresses the same node every round) and unlinkable to the raw id or across runs."""
        return hashlib.blake2b(b"node/" + int(node_id).to_bytes(8, "big"), key=self._key, digest_size=6).hexdigest()

    def seal(self, update_id: str, user_id: str, rnd: int, fields: dict[str, object] | None = None) -> None:
        """File one update's truth: its user, round and any per-update facts the device reported
        (e.g. whether its batches held a property) that suite attacks are scored against."""
        with self._path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"update_id": update_id, "user_id": user_id, "round": rnd, **(fields or {})}) + "\n")
