"""The truth store: a run's sealed (update id -> owner, round, facts) read back for scoring."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from leakbed.referee.seal import TRUTH_FILE


class Referee:
    """The sealed truth of one prior's run."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self._truth: dict[str, str] = {}
        self._fields: dict[str, dict[str, object]] = {}

    @classmethod
    def load(cls, folder: str | Path) -> Referee:
        """The referee of a run, its sealed truth read back as it stands (finished or in progress)."""
        ref = cls(folder)
        path = ref.folder / TRUTH_FILE
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                if not line.strip():
                    continue
                rec = json.loads(line)
                uid, user = rec.pop("update_id"), rec.pop("user_id")
                ref._truth[uid] = user
                ref._fields[uid] = rec
        return ref

    def records(self) -> list[dict]:
        """Every sealed record, in the order sealed."""
        return [{"update_id": u, "user_id": self._truth[u], **self._fields[u]} for u in self._truth]

    def truth_for(self, ids: np.ndarray) -> np.ndarray:
        return np.asarray([self._truth[str(i)] for i in ids], dtype=str)

    def field_for(self, ids: np.ndarray, name: str) -> list[object]:
        """A sealed per-update fact for each id."""
        return [self._fields[str(i)][name] for i in ids]

    def fields_for(self, ids: np.ndarray, names: tuple[str, ...] | list[str]) -> dict[str, list]:
        """The sealed truth fields ``names`` for each id, in order: ``user_id`` is the owner, ``round`` the training
        round, any other name a per-update fact; None where an update lacks it (or is not sealed)."""
        out: dict[str, list] = {}
        for name in names:
            if name == "user_id":
                out[name] = [self._truth.get(str(i)) for i in ids]
            else:
                out[name] = [self._fields.get(str(i), {}).get(name) for i in ids]
        return out
