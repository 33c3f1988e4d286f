"""Referee scoring of embedding-layer membership inference (seed 002 §7.2.2, Table 7.2).

Truth: each device sealed the content hashes of the records its update's batches used. The referee
rebuilds the federation from the frozen config to read those records, and draws as many
non-members from the utility hold-out (never trained on; records equal to a member are excluded).
The attack's decision rule (``attacks.membership.is_member``: V_r ⊆ V_t against the batch
vocabulary the attack read from the update) is applied to both; precision = TP / (TP + FP) at the
run's batch size, recall = TP / members (1 by construction). Records changed by a data-level
defense (not found by hash) are counted apart. Kind ``membership``.

Coverage: one batch vocabulary per given update. A given update without a row has no decision rule, so each record
tested against it (its members, and as many drawn non-members) is declared a member or not by a fair coin the
referee tosses: precision on those records is chance (0.5 on the balanced query set), and the recall of 1 by
construction no longer holds for them. Packed bits are always finite. Precision and recall are over every given update.
Sets: the members are the sealed batch records, the non-members the referee's own draw from the hold-out.
"""

from __future__ import annotations

import numpy as np

from leakbed.core.data import Federation
from leakbed.core.record_hash import record_hash
from leakbed.core.vocabulary_sets import is_member, read_vocabularies
from leakbed.referee.context import ScoreContext
from leakbed.referee.coverage import Coverage
from leakbed.referee.schemas import OutputsError

SEED_TABLE_7_2 = {32: 0.92, 64: 0.84, 128: 0.75, 256: 0.66, 512: 0.62}  # Yelp-health, batch size -> precision


Record = tuple[np.ndarray, np.ndarray]


def record_index(fed: Federation) -> tuple[dict[int, Record], list[Record]]:
    """(hash -> (x, y) of every device's private record, hold-out records) of the run's federation."""
    private = {}
    for pid in range(len(fed.user_ids)):
        data = fed.private(pid)
        private.update({record_hash(x): (x, y) for x, y in zip(data.x, data.y, strict=True)})
    held_out = [
        (x, y)
        for u in fed.user_ids
        for x, y in zip(fed.splits[u].test.x, fed.splits[u].test.y, strict=True)
        if record_hash(x) not in private
    ]
    return private, held_out


def score_membership(ctx: ScoreContext) -> dict:
    res = ctx.outputs
    if res["vocab"].dtype != np.uint8:
        raise OutputsError(f"outputs: 'vocab' must be uint8 (n, ?) packed bits; got {res['vocab'].dtype} {res['vocab'].shape}")
    size = int(res["vocab_size"])
    if not 0 <= size <= 8 * res["vocab"].shape[1]:
        raise OutputsError(f"outputs: 'vocab_size' must be within 0..{8 * res['vocab'].shape[1]} (the packed bits); got {size}")
    ids, _rounds, vocab = read_vocabularies(res)
    cov = Coverage.of(ctx, "membership", ids, vocab)
    referee, cfg = ctx.truth, ctx.cfg
    private, held_out = record_index(ctx.federation)
    rng = np.random.default_rng([cfg.seed, 0x3E3])
    tp = fn = fp = tn = missing = 0
    sizes = []
    for uid, row in zip(cov.given.tolist(), cov.row.tolist(), strict=True):
        v = vocab[row] if row >= 0 else None
        hashes = [int(h) for h in referee.field_for(np.asarray([uid]), "batch-records")[0]]
        members = [private[h] for h in hashes if h in private]
        missing += len(hashes) - len(members)
        sizes.append(len(hashes))
        hits = sum(_decide(x, v, y, cov.rng) for x, y in members)
        tp, fn = tp + hits, fn + len(members) - hits
        if held_out and members:
            pick = rng.choice(len(held_out), size=len(members), replace=len(members) > len(held_out))
            false = sum(_decide(held_out[i][0], v, held_out[i][1], cov.rng) for i in pick)
            fp, tn = fp + false, tn + len(members) - false
    vocab = vocab[cov.row[cov.ok]]
    batch = int(np.median(sizes)) if sizes else 0
    precision = tp / (tp + fp) if tp + fp else None
    recall = tp / (tp + fn) if tp + fn else None
    return {
        "precision": precision,
        "recall": recall,
        "chance": 0.5,  # precision of declaring everything a member on the balanced query set
        "batch_records": batch,
        "updates": int(len(cov.given)),
        **cov.report(),
        "members_tested": tp + fn,
        "non_members_tested": fp + tn,
        "records_not_found": missing,
        "vocab_per_update": float(vocab.sum(1).mean()) if len(vocab) else None,
        "vocab_size": int(vocab.shape[1]) if vocab.ndim == 2 else 0,
        "tables": {
            "Membership inference precision (recall is 1), as seed 002 Table 7.2": {
                "header": ["records per update", "precision", "recall", "seed (Yelp-health) batch: precision"],
                "rows": [
                    [
                        batch,
                        "—" if precision is None else f"{precision:.3f}",
                        "—" if recall is None else f"{recall:.3f}",
                        ", ".join(f"{b}: {p}" for b, p in SEED_TABLE_7_2.items()),
                    ]
                ],
            }
        },
        "notes": [cov.note("missing rows are decided by a fair coin the referee tosses (chance precision)")],
    }


def _decide(x: np.ndarray, vocab: np.ndarray | None, y: np.ndarray, rng: np.random.Generator) -> bool:
    """The attack's rule on its vocabulary, or the referee's coin where the attack left no row."""
    return is_member(x, vocab, y) if vocab is not None else bool(rng.random() < 0.5)
