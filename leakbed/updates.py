"""How an update is represented for the attacks (seed 001 §6, "Representing Δw for Attacks").

Δw = w_global − w_local on the selected parameters, flattened and L2-normalised.
"""

from __future__ import annotations

import numpy as np


def delta_vector(global_arrays: dict[str, np.ndarray], local_arrays: dict[str, np.ndarray], keys: list[str]) -> np.ndarray:
    """The L2-normalised, flattened Δw over ``keys`` (float32); a zero update stays zero."""
    parts = [(np.asarray(global_arrays[k], np.float64) - np.asarray(local_arrays[k], np.float64)).ravel() for k in keys]
    vec = np.concatenate(parts)
    norm = np.linalg.norm(vec)
    return (vec / norm if norm > 0 else vec).astype(np.float32)
