"""What the example count alone gives away, without training (issue 12): the count-only attack of
``attacks.metadata`` on the counts the devices of a config would report, scored like the closed world.

    .venv/bin/python -m benchmarks.metadata_counts configs/metadata.toml [--set KEY=VALUE ...] [--report exact|bucket|constant]

It builds the config's federation and prior split exactly as a run does, samples C·K devices a round
as the curious strategy does (a seeded draw here, not the run's node sampling), lets each report its
private size (through ``defenses.count_report.reported_count`` for the count defenses), and scores
``attacks.metadata.count_loglik`` against the owners with ``attacks.scoring.reid_metrics``. No Ray,
no training: seconds even on FEMNIST. The norm, the weights and linkage need a real run
(``leakbed run``); this measures only the count, which is deterministic given the data.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from scipy.special import log_softmax

from attacks.metadata import count_loglik, report_rule, tie_break
from attacks.scoring import reid_metrics
from core.config import DefenseConfig, load_config
from core.data import federation
from defenses.count_report import reported_count


def measure(config: str, overrides: list[str], report: str) -> dict:
    cfg = load_config(config, overrides)
    rule = cfg.split.priors[0]
    fed = federation(cfg, rule)
    users = fed.user_ids
    prior = fed.prior()
    defenses = {"exact": [], "bucket": [DefenseConfig(name="count-bucket")], "constant": [DefenseConfig(name="count-constant")]}
    rng = np.random.default_rng([cfg.seed, 0x12])
    k = max(int(len(users) * cfg.fl.fraction_train), 1)
    owners, counts = [], []
    for _ in range(cfg.fl.rounds):
        for i in rng.choice(len(users), k, replace=False):
            owners.append(users[i])
            counts.append(reported_count(len(fed.private(int(i))), defenses[report]))
    counts_a = np.asarray(counts)
    sizes = np.asarray([len(prior[u]) for u in users], np.float64)
    got = report_rule(counts_a)
    ll, params = count_loglik(counts_a, sizes, got)
    scores = tie_break(log_softmax(ll, axis=1), cfg.seed)
    m = reid_metrics(np.asarray(owners), np.asarray(users), scores)
    private = np.asarray([len(fed.private(i)) for i in range(len(users))])
    return {
        "config": config,
        "overrides": overrides,
        "report": report,
        "users": len(users),
        "updates": len(owners),
        "distinct_counts": int(len(np.unique(counts_a))),
        "private_size_range": [int(private.min()), int(private.max())],
        "rule_read": got,
        "scale": params["scale"],
        **{key: m[key] for key in ("ap", "chance_ap", "x_chance", "top1", "top5")},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="count-only metadata re-identification of a config, no training")
    parser.add_argument("config")
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    parser.add_argument("--report", choices=["exact", "bucket", "constant"], default="exact")
    args = parser.parse_args()
    print(json.dumps(measure(args.config, args.overrides, args.report)))


if __name__ == "__main__":
    main()
