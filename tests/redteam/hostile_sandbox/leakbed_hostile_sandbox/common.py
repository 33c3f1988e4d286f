"""What the sandbox red team's attacks share: a closed-world ranking to be scored by, and evidence as JSON."""

from __future__ import annotations

import json
import zlib

import numpy as np


def ranking(ctx, salt: str) -> dict[str, np.ndarray]:  # noqa: ANN001 - an AttackContext
    """A random closed-world ranking of every update it was given (its own seed)."""
    anon = ctx.store.read_anon()
    ids = [str(i) for i in anon["ids"]]
    classes = sorted(ctx.knowledge.prior)
    rng = np.random.default_rng([ctx.seed, zlib.crc32(salt.encode())])
    return {"ids": np.asarray(ids, dtype=str), "classes": np.asarray(classes, dtype=str),
            "scores": rng.random((len(ids), len(classes)))}  # fmt: skip


def with_evidence(outputs: dict[str, np.ndarray], doc: dict) -> dict[str, np.ndarray]:
    return {**outputs, "evidence": np.asarray(json.dumps(doc, default=str)[:200_000])}
