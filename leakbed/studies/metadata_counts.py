"""What the example count alone gives away, without training (issue 12): the count-only scores of the
``metadata`` attack on the counts the devices of a config would report, scored like the closed world.

    .venv/bin/python -m leakbed.studies.metadata_counts leakbed/configs/metadata.toml [--set KEY=VALUE ...] \
        [--report exact|bucket|constant]

It builds the config's federation and prior split exactly as a run does, samples C·K devices a round
as the curious strategy does (a seeded draw here, not the run's node sampling), lets each report its
private size (as the count defenses' Mods would rewrite it), files those reports as anonymous updates
(opaque ids, no weights) in a study store, has the ``metadata`` attack fit them in a sandboxed attack
worker, and scores its ``count_only`` outputs against the owners kept here with
``core.reid_metrics.reid_metrics``. No Ray, no FL training: seconds even on FEMNIST. The norm, the
weights and linkage need a real run (``leakbed run``); this measures only the count, which is
deterministic given the data.
"""

from __future__ import annotations

import argparse
import json
import secrets
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from leakbed.core.config import ExperimentConfig, load_config
from leakbed.core.data import federation
from leakbed.core.derive import derived_seed
from leakbed.core.errors import Failed
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.reid_metrics import reid_metrics
from leakbed.core.store import UpdateStore
from leakbed.defenses.count_report import bucketed
from leakbed.studies.pools import study_pool
from leakbed.workers import Fit

ATTACK = "metadata"
REPORTS = {"exact": lambda n: n, "bucket": bucketed, "constant": lambda _n: 1}  # as the count defenses' Mods report


def measure(config: str, overrides: list[str], report: str) -> dict:
    cfg = load_config(config, overrides)
    rule = cfg.split.priors[0]
    fed = federation(cfg, rule)
    users = fed.user_ids
    rng = np.random.default_rng([cfg.seed, 0x12])
    k = max(int(len(users) * cfg.fl.fraction_train), 1)
    owners, counts, rounds = [], [], []
    for rnd in range(1, cfg.fl.rounds + 1):
        for i in rng.choice(len(users), k, replace=False):
            owners.append(users[i])
            counts.append(REPORTS[report](len(fed.private(int(i)))))
            rounds.append(rnd)
    counts_a = np.asarray(counts)
    knowledge = AttackerKnowledge(
        prior=fed.prior(),
        corpus_meta=replace(fed.corpus, users={}),
        model=cfg.model,
        keys=[],
        seed=derived_seed(cfg.seed, "attacker"),
        device="cpu",
    )
    out = fit_counts(cfg, knowledge, np.asarray(owners), counts_a, np.asarray(rounds))
    m = reid_metrics(out["owners"], out["classes"], out["count_only"])
    private = np.asarray([len(fed.private(i)) for i in range(len(users))])
    return {
        "config": config,
        "overrides": overrides,
        "report": report,
        "users": len(users),
        "updates": len(owners),
        "distinct_counts": int(len(np.unique(counts_a))),
        "private_size_range": [int(private.min()), int(private.max())],
        "rule_read": str(out["rule"]),
        "scale": float(out["scale"]),
        **{key: m[key] for key in ("ap", "chance_ap", "x_chance", "top1", "top5")},
    }


def fit_counts(
    cfg: ExperimentConfig, knowledge: AttackerKnowledge, owners: np.ndarray, counts: np.ndarray, rounds: np.ndarray
) -> dict:
    """The metadata attack's outputs on these reports, fitted in a sandboxed worker; ``owners`` joined back here."""
    with tempfile.TemporaryDirectory(prefix="leakbed-counts-") as tmp:
        root = Path(tmp)
        store = UpdateStore(root / "store" / "counts")
        knowledge.save(store.root)
        ids = np.asarray([secrets.token_hex(8) for _ in owners])
        for rnd in np.unique(rounds):
            sel = rounds == rnd
            n = int(sel.sum())
            meta = {"norm": np.ones(n), "sparsity": np.zeros(n), "nbytes": np.zeros(n)}
            store.write_anon(int(rnd), "counts", list(ids[sel]), np.zeros((n, 1), np.float32), counts[sel], meta)
        # the counts alone: the pool runs the metadata attack with no weight attacker beside it (nothing to build on)
        pool = study_pool(cfg, knowledge, root, [ATTACK], run_id="counts", count=1)
        try:
            pool.fit([Fit(ATTACK)])
        finally:
            pool.close()
        if not pool.stats.fitted(ATTACK):
            raise Failed(f"the metadata fit failed: {'; '.join(pool.stats.errors[-2:])}", "analysis")
        result = pool.read_output(Fit(ATTACK))
    owner_of = dict(zip(ids, owners, strict=True))
    return {**result, "owners": np.asarray([owner_of[str(i)] for i in result["ids"]])}


def main() -> None:
    parser = argparse.ArgumentParser(description="count-only metadata re-identification of a config, no training")
    parser.add_argument("config")
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    parser.add_argument("--report", choices=["exact", "bucket", "constant"], default="exact")
    args = parser.parse_args()
    print(json.dumps(measure(args.config, args.overrides, args.report)))


if __name__ == "__main__":
    main()
