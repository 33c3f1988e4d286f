"""How often an honest run's 90% interval of ε_emp holds the exact ε: the privacy audit's coverage over seeds.

    python -m leakbed.reference.audit_coverage [--seeds 1000] [--runs 20]   # writes docs/results/data/audit-coverage.json

Two ways, each on an honest DP-FedAvg (every inserted canary in every round, exact ε = the Gaussian mechanism's at
μ = sqrt(T)/z):

- ``simulate``: the canaries' cosines with the released deltas drawn exactly in distribution, at the size of
  leakbed/configs/audit.toml (d = 72,042 parameters, 128 candidate canaries, 20 rounds, z = 1). Only what the
  statistics depend on is drawn: the canaries' directions inside their own k-dimensional span and the norms outside
  it (Bartlett's decomposition of a Wishart matrix), so a thousand seeds take seconds;
- ``reference.audit_harness``: small real runs through Flower's wrapper and the devices' Mods (d = 20,200, 10 rounds).

Beside the coverage: how often Andrew et al.'s own fit (two free spreads) lands above the accountant's ε on the same
statistics, and how often the flag (an interval wholly above the accountant's ε) fires on an honest run.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from leakbed.core.audit_epsilon import gdp_epsilon
from leakbed.core.audit_estimates import equal_spread_estimate, known_null_estimate, two_spread_epsilon
from leakbed.core.privacy import rdp_epsilon
from leakbed.reference.audit_harness import ROUNDS, audited_run, config, identity

DATA = Path(__file__).resolve().parents[2] / "docs" / "results" / "data" / "audit-coverage.json"

DELTA = 1e-5


def _bartlett(rng: np.random.Generator, df: int, n: int) -> np.ndarray:
    """L with L Lᵀ ~ Wishart(df, I_n): chi draws on the diagonal, standard normals below it."""
    low = np.tril(rng.standard_normal((n, n)), -1)
    return low + np.diag(np.sqrt(rng.chisquare(df - np.arange(n))))


def simulate(seed: int, k: int = 128, dim: int = 72_042, rounds: int = 20, z: float = 1.0) -> dict[str, np.ndarray]:
    """One honest run's canary statistics: per-round cosines (T, k), the final model's (k,), the inclusion mask.

    Units: a canary adds 1 to the released delta along its direction each round it is in, the noise is N(0, z²) per
    coordinate. The directions of k unit Gaussian vectors in d dimensions are the rows of a Bartlett factor (in a basis
    of their span), normalised; the noise's projection on that span is N(0, z² I_k), its part outside has norms (and,
    summed over rounds, cross products) from a Wishart(d − k, z² I_T)."""
    rng = np.random.default_rng([seed, 40])
    inserted = rng.random(k) < 0.5
    basis = _bartlett(rng, dim, k)
    canaries = basis / np.linalg.norm(basis, axis=1, keepdims=True)
    signal = canaries[inserted].sum(axis=0)
    inside = signal + z * rng.standard_normal((rounds, k))  # each round's delta in the canaries' span
    outside = z * z * (lambda r: r @ r.T)(_bartlett(rng, dim - k, rounds))  # Gram matrix of the parts outside it
    per_round = (inside @ canaries.T) / np.sqrt((inside**2).sum(axis=1) + np.diag(outside))[:, None]
    total = inside.sum(axis=0)
    final = canaries @ total / math.sqrt(float(total @ total) + float(outside.sum()))
    return {"per_round": per_round, "final": final, "inserted": inserted}


def _tally(estimates: list[dict], exact: float, claim: float) -> dict:
    inside = [e["interval"][0] <= exact <= e["interval"][1] for e in estimates]
    return {
        "coverage": float(np.mean(inside)),
        "below": float(np.mean([e["interval"][1] < exact for e in estimates])),
        "above": float(np.mean([e["interval"][0] > exact for e in estimates])),
        "flagged": float(np.mean([e["interval"][0] > claim for e in estimates])),
        "median": float(np.median([e["epsilon_emp"] for e in estimates])),
        "median_width": float(np.median([e["interval"][1] - e["interval"][0] for e in estimates])),
    }


def simulated_coverage(seeds: int, k: int = 128, dim: int = 72_042, rounds: int = 20, z: float = 1.0) -> dict:
    """Coverage of the final-model and all-iterates intervals over ``seeds`` simulated honest runs, and Andrew et al.'s
    two-spread fit on the same all-iterates statistics."""
    exact = gdp_epsilon(math.sqrt(rounds) / z, DELTA)
    claim = rdp_epsilon(z, 1, 1, rounds, DELTA)
    assert claim is not None
    final, summed, two = [], [], []
    for seed in range(seeds):
        s = simulate(seed, k, dim, rounds, z)
        ins = s["inserted"]
        total = s["per_round"].sum(axis=0)
        final.append(known_null_estimate(s["final"][ins], s["final"][~ins], 1 / math.sqrt(dim), DELTA))
        summed.append(equal_spread_estimate(total[ins], total[~ins], DELTA))
        two.append(two_spread_epsilon(total[ins], total[~ins], DELTA))
    return {
        "setting": {"canaries": k, "dimension": dim, "rounds": rounds, "noise_multiplier": z, "delta": DELTA, "seeds": seeds},
        "epsilon_exact": exact,
        "epsilon_accountant": claim,
        "final model": _tally(final, exact, claim),
        "all iterates": _tally(summed, exact, claim),
        "two spreads": {
            "median": float(np.median(two)),
            "interval_90": [float(np.quantile(two, 0.05)), float(np.quantile(two, 0.95))],
            "above_accountant": float(np.mean(np.array(two) > claim)),
        },
    }


def run_coverage(runs: int) -> dict:
    """Coverage over ``runs`` seeds of the small real runs (``reference.audit_harness``, DP-FedAvg clip 0.5, z = 1)."""
    identity()
    summaries = [audited_run(config('dp-fedavg", clip=0.5, noise_multiplier=1.0', seed=seed), noise_secret=seed).summary
                 for seed in range(runs)]  # fmt: skip
    exact, claim = summaries[0]["epsilon_exact"], summaries[0]["epsilon_accountant"]
    out: dict = {"setting": {"canaries": 128, "dimension": summaries[0]["dimension"], "rounds": ROUNDS,
                             "noise_multiplier": 1.0, "delta": DELTA, "seeds": runs},
                 "epsilon_exact": exact, "epsilon_accountant": claim,
                 "flagged_runs": sum(s["flagged"] for s in summaries)}  # fmt: skip
    for view in ("final model", "all iterates"):
        out[view] = _tally([s[view] for s in summaries], exact, claim)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m leakbed.reference.audit_coverage", description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1000, help="simulated honest runs")
    parser.add_argument("--runs", type=int, default=20, help="small real runs through the mechanism (0: none)")
    parser.add_argument("--out", type=Path, default=DATA, help="where the summary goes (JSON)")
    args = parser.parse_args(argv)
    if args.seeds < 10 or args.runs < 0:
        parser.error("--seeds must be at least 10 and --runs at least 0")
    summary = {"kind": "audit-coverage", "command": f".venv/bin/python -m leakbed.reference.audit_coverage --seeds {args.seeds} "
               f"--runs {args.runs}", "simulated": simulated_coverage(args.seeds)}  # fmt: skip
    if args.runs:
        summary["runs"] = run_coverage(args.runs)
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
