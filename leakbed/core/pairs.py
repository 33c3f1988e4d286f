"""Pairs of updates for the Siamese matching network (seed 001 §4.3): how balanced pairs are drawn and how a trained
network's distance head scores a pair. The attack side trains on such pairs; the referee draws its test pairs the
same way and scores them with the head an attack wrote (plain arrays, no attack code)."""

from __future__ import annotations

import numpy as np


def balanced_pairs(labels: np.ndarray, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` index pairs (i ≠ j), half with equal labels and half with different ones.

    Positives draw a label with at least two items, then two distinct items of it; negatives draw
    two items and redraw the second until the labels differ. Returns (i, j, same ∈ {0, 1}).
    """
    labels = np.asarray(labels)
    uniq, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    members = [np.flatnonzero(inverse == k) for k in range(len(uniq))]
    multi = np.flatnonzero(counts >= 2)
    n_pos = n // 2 if len(multi) else 0
    n_neg = n - n_pos if len(uniq) >= 2 else 0
    i_pos = np.empty(n_pos, np.int64)
    j_pos = np.empty(n_pos, np.int64)
    if n_pos:
        ks = multi[rng.integers(0, len(multi), n_pos)]
        for t, k in enumerate(ks):
            i_pos[t], j_pos[t] = rng.choice(members[k], 2, replace=False)
    i_neg = rng.integers(0, len(labels), n_neg)
    j_neg = rng.integers(0, len(labels), n_neg)
    bad = inverse[i_neg] == inverse[j_neg]
    while bad.any():
        j_neg[bad] = rng.integers(0, len(labels), int(bad.sum()))
        bad = inverse[i_neg] == inverse[j_neg]
    same = np.concatenate([np.ones(n_pos), np.zeros(n_neg)]).astype(np.float32)
    return np.concatenate([i_pos, i_neg]), np.concatenate([j_pos, j_neg]), same


def pair_scores(
    emb_a: np.ndarray, emb_b: np.ndarray, head_w: np.ndarray, head_b: np.ndarray, i: np.ndarray, j: np.ndarray
) -> np.ndarray:
    """P[same] for pairs (emb_a[i], emb_b[j]): the trained network's L1 + FC-1 + sigmoid part."""
    logits = np.abs(emb_a[i] - emb_b[j]) @ head_w + float(head_b[0])
    return 1.0 / (1.0 + np.exp(-logits))
