"""A record's name for sealed truth: the device reports which records its update used by content
hash, and the referee matches them against its own copy of the data (seed 002 §7.1.3 membership)."""

from __future__ import annotations

import zlib

import numpy as np


def record_hash(x: np.ndarray) -> int:
    """crc32 of the record's contiguous bytes (tokens or pixels)."""
    return zlib.crc32(np.ascontiguousarray(x).tobytes())
