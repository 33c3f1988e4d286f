"""The referee: the only holder of ground truth. It receives sealed (update id → user id) pairs
from the shuffler, never passes them on, and joins them with the attacks' predictions.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from attacks.scoring import reid_metrics
from leakbed.store import UpdateStore


class Referee:
    """Ground truth sealed in a file the attack side is never told about."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._path = self.folder / "truth.jsonl"
        self._truth: dict[str, str] = {}
        self._fields: dict[str, dict[str, object]] = {}

    def seal(self, update_id: str, user_id: str, rnd: int, fields: dict[str, object] | None = None) -> None:
        """File one update's truth: its user, round and any per-update facts the device reported
        (e.g. whether its batches held a property) that suite attacks are scored against."""
        self._truth[update_id] = user_id
        self._fields[update_id] = {"round": rnd, **(fields or {})}
        with self._path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"update_id": update_id, "user_id": user_id, "round": rnd, **(fields or {})}) + "\n")

    @classmethod
    def load(cls, folder: str | Path) -> Referee:
        """The referee of a finished run, its sealed truth read back (to re-score stored results)."""
        ref = cls(folder)
        if ref._path.exists():
            for line in ref._path.read_text(encoding="utf-8").splitlines():
                rec = json.loads(line)
                uid, user = rec.pop("update_id"), rec.pop("user_id")
                ref._truth[uid] = user
                ref._fields[uid] = rec
        return ref

    def truth_for(self, ids: np.ndarray) -> np.ndarray:
        return np.asarray([self._truth[str(i)] for i in ids])

    def field_for(self, ids: np.ndarray, name: str) -> list[object]:
        """A sealed per-update fact (see ``seal``) for each id."""
        return [self._fields[str(i)][name] for i in ids]

    def score(self, store: UpdateStore, attacker: str, groups: dict[str, set[str]] | None = None) -> dict:
        """Overall and per-round metrics for one attacker's predictions, and per group of users
        (e.g. defending / not defending), each group ranked among its own updates only."""
        pred = store.read_predictions(attacker)
        truth = self.truth_for(pred["ids"])
        overall = reid_metrics(truth, pred["classes"], pred["scores"])
        by_group = {}
        for name, users in (groups or {}).items():
            sel = np.isin(truth, list(users))
            by_group[name] = reid_metrics(truth[sel], pred["classes"], pred["scores"][sel])
        per_round = {}
        for rnd in np.unique(pred["rounds"]):
            sel = pred["rounds"] == rnd
            per_round[int(rnd)] = reid_metrics(truth[sel], pred["classes"], pred["scores"][sel])
        return {**overall, "per_round": per_round, "groups": by_group}
