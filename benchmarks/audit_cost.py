"""What the privacy audit costs the server per round: a round's aggregation with and without the canaries.

``python -m benchmarks.audit_cost [--canaries 128] [--rounds 5] [--repeats 3]``

At leakbed/configs/audit.toml's size (60 devices every round, a model of about 72,000 float entries, DP-FedAvg at
clip 0.5, z = 1), through the real mechanism (``leakbed.reference.audit_harness``: Flower's DP wrapper, every reply
through the device Mods): the median wall time of a round's ``aggregate_train`` without an audit and with
``--canaries`` candidates (about half inserted, each replying every round: its update made, clipped by the device Mod,
averaged, and every candidate's cosine with the released delta taken). Training on the devices is not in either: the
difference is what the audit adds to the server's round. Prints a table; the last line of stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics

from benchmarks.common import quiet_env, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--canaries", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    quiet_env()
    from leakbed.reference.audit_harness import Size, audited_run, config, identity

    identity()
    size = Size(users=60, sampled=60, shape=(720, 100))  # 72,720 float entries, about the audit config's 72,042
    defense = 'dp-fedavg", clip=0.5, noise_multiplier=1.0'
    seconds: dict[int, list[float]] = {0: [], args.canaries: []}
    inserted = 0
    for _ in range(args.repeats):
        for k in seconds:
            run = audited_run(config(defense, canaries=k, rounds=args.rounds, size=size), size=size)
            seconds[k] += run.aggregation_seconds[1:]  # round 1 pays first-call costs
            inserted = run.summary.get("per_round", inserted)
    plain, audited = (statistics.median(seconds[k]) for k in seconds)
    rows = [["without the audit", 0, f"{1000 * plain:.1f}"], [f"{args.canaries} candidates", inserted, f"{1000 * audited:.1f}"]]
    print(table(["round's aggregation", "canary replies a round", "median ms"], rows))
    summary = {"dimension": size.shape[0] * (size.shape[1] + 1), "devices": size.sampled, "candidates": args.canaries,
               "canaries_per_round": inserted, "aggregation_ms": 1000 * plain, "audited_aggregation_ms": 1000 * audited,
               "audit_ms_per_round": 1000 * (audited - plain), "rounds_measured": len(seconds[0])}  # fmt: skip
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
