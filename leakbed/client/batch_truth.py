"""Per-update facts a device reports in its sealed truth record, for the referee only.

Property inference (seed 002 §7.1.4) is scored against whether the examples behind an update held
the property and what share did; membership inference (§7.1.3) against which records the update's
batches used. Records are named by a content hash (crc32 of the token/pixel bytes), so the referee
can match them to its own copy of the data without any index bookkeeping across defenses.
"""

from __future__ import annotations

import numpy as np

from leakbed.core.data.corpus import UserData
from leakbed.core.record_hash import record_hash
from leakbed.core.training import TrainConfig, batch_indices


def batch_truth(data: UserData, cfg: TrainConfig, seed: int, *, records: bool) -> dict[str, object]:
    """``has-property`` / ``property-fraction`` of the examples the update's batches used (when the
    data carries a ``property`` attribute), and their record hashes (with each one's property) when ``records``."""
    used = batch_indices(len(data), cfg, seed)
    idx = np.unique(np.concatenate([b.numpy() for b in used])) if used else np.empty(0, np.int64)
    out: dict[str, object] = {"batch-examples": int(len(idx))}
    if "property" in data.attrs:
        prop = np.asarray(data.attrs["property"])[idx].astype(bool)
        out["has-property"] = int(prop.any())
        out["property-fraction"] = float(prop.mean()) if len(prop) else 0.0
    if records:
        out["batch-records"] = [record_hash(data.x[i]) for i in idx]
        if "property" in data.attrs:  # per sample, aligned with batch-records (the reconstruction attacks' truth)
            out["batch-properties"] = [int(v) for v in np.asarray(data.attrs["property"])[idx].astype(bool)]
    return out
