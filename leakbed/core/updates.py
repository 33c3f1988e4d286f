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


def max_pooled(delta: dict[str, np.ndarray], divisor: float = 1.0) -> np.ndarray:
    """Seed 002 §7.1.4's global max pooling of Δw ÷ ``divisor`` (float32): per weight, the max over
    each axis (one feature per output unit, one per input position); biases as they are. Shared by
    the server's property attacks and the adversarial participant, which divides by ‖Δw‖."""
    parts = []
    for key in sorted(delta):
        arr = np.asarray(delta[key], np.float64) / divisor
        if arr.ndim >= 2:
            flat = arr.reshape(arr.shape[0], -1)
            parts += [flat.max(axis=1), flat.max(axis=0)]
        else:
            parts.append(arr.ravel())
    return np.concatenate(parts).astype(np.float32)
