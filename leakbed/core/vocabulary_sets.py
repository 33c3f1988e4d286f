"""Batch vocabularies and the membership rule of seed 002 §7.1.3: a record r with tokens V_r is a member of an
update's batches iff V_r ⊆ V_t, V_t being the tokens whose embedding rows the update changed. The membership attack
writes V_t per update (packed bits); the referee applies the rule to the records it knows were used, and to others."""

from __future__ import annotations

import numpy as np

PAD = 0


def record_tokens(x: np.ndarray, y: np.ndarray | None = None) -> np.ndarray:
    """V_r: the distinct non-padding input tokens of a record that reach the loss (for a next-token
    window ``y``, those up to the last non-padding target)."""
    x = np.asarray(x).ravel()
    if y is not None and np.ndim(y) == np.ndim(x) == 1 and len(y) == len(x):
        real = np.flatnonzero(np.asarray(y) != PAD)
        x = x[: real.max() + 1] if len(real) else x[:0]
    tokens = np.unique(x)
    return tokens[tokens != PAD]


def is_member(x: np.ndarray, vocab: np.ndarray, y: np.ndarray | None = None) -> bool:
    """§7.1.3's decision rule: V_r ⊆ V_t (``vocab`` is the boolean batch vocabulary)."""
    tokens = record_tokens(x, y)
    return bool(np.all(tokens < len(vocab)) and vocab[tokens].all())


def read_vocabularies(res: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The attack's outputs as (ids, rounds, boolean batch vocabularies)."""
    size = int(res["vocab_size"])
    return res["ids"], res["rounds"], np.unpackbits(res["vocab"], axis=1, count=size).astype(bool)
