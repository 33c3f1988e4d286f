"""Reject malformed replies before they reach the shuffler, the attacks or the aggregate."""

from __future__ import annotations

import numpy as np
from flwr.app import Message

from leakbed.server.shuffler import TRUTH_KEY


def reply_problem(msg: Message, global_arrays: dict[str, np.ndarray], max_bytes: int = 0) -> str | None:
    """Why a reply cannot be used (oversized, wrong records, keys, shapes, non-finite values), or None.

    ``max_bytes`` bounds the array data of the whole reply (every array record); 0 means twice
    the global model (plus headers), which a well-formed reply (one copy of the model) never reaches.
    """
    content = msg.content
    # (each serialized array carries a .npy header of about a hundred bytes: allowed for on top)
    limit = max_bytes or 2 * sum(int(a.nbytes) for a in global_arrays.values()) + 1024 * max(1, len(global_arrays))
    size = sum(len(arr.data) for record in content.array_records.values() for arr in record.values())
    if size > limit:
        return f"oversized: {size} bytes of arrays > {limit}"
    if "arrays" not in content.array_records or "metrics" not in content.metric_records:
        return "missing arrays or metrics record"
    if TRUTH_KEY not in content.config_records:
        return "missing ground-truth record"
    arrays = content.array_records["arrays"]
    if set(arrays.keys()) != set(global_arrays):
        return "parameter names differ from the global model"
    for key, ref in global_arrays.items():
        arr = arrays[key].numpy()
        if arr.shape != ref.shape:
            return f"{key}: shape {arr.shape} != {ref.shape}"
        if np.issubdtype(arr.dtype, np.floating) and not np.isfinite(arr).all():
            return f"{key}: non-finite values"
    n = content.metric_records["metrics"].get("num-examples")
    if not isinstance(n, int | float) or n <= 0:
        return "num-examples missing or not positive"
    return None
