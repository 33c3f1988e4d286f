"""Referee side of the red team (``leakbed/attacks/redteam.py``): how often each probe named an update's
true owner (chance: 1/|users|) or its true training round (chance: 1/|rounds|), and what it found. Kind ``redteam``.

Coverage: each probe's ``owner`` and ``round`` lists follow the store's order of the anonymous updates (what the red
team read). Accuracies are over every given update; a given update past the end of a probe's lists (or not in the
store) counts as no guess, i.e. wrong, not as a random guess: the red team must show a signal beyond chance, and a
gap must not add one. Entries for updates that were not given are ignored.
"""

from __future__ import annotations

import json

import numpy as np

from leakbed.core.plugin_text import plugin_text
from leakbed.referee.context import ScoreContext
from leakbed.referee.coverage import Coverage, fill_rng


def probe_metrics(found: dict, ids: list[str], owners: np.ndarray, rounds: np.ndarray, n_users: int, n_rounds: int) -> dict:
    """Per probe: owner and round accuracy against chance, and its evidence."""
    table = {}
    for name, p in found.items():
        owner = np.asarray(p["owner"])
        rnd = np.asarray(p["round"])
        table[name] = {
            "owner_accuracy": float(np.mean(owner == owners)) if len(ids) else 0.0,
            "round_accuracy": float(np.mean(rnd == rounds)) if len(ids) else 0.0,
            "guessed": int(np.sum(owner != "")),
            "evidence": list(p["evidence"]),
        }
    return {"owner_chance": 1.0 / max(1, n_users), "round_chance": 1.0 / max(1, n_rounds), "probes": table}


def score(ctx: ScoreContext) -> dict:
    store, referee = ctx.store, ctx.truth
    found_all = json.loads(str(ctx.outputs["found"]))
    found, breakout = found_all["probes"], found_all["breakout"]
    filed = [str(i) for i in store.anon_ids()]
    listed = min((min(len(p["owner"]), len(p["round"])) for p in found.values()), default=len(filed))
    cov = Coverage(ctx.given, np.asarray(filed[:listed], dtype=str), rng=fill_rng(ctx.cfg.seed, "redteam", ctx.attack))
    ids = cov.given.tolist()
    aligned = {
        name: {
            "owner": [str(p["owner"][k]) if k >= 0 else "" for k in cov.row.tolist()],
            "round": [int(p["round"][k]) if k >= 0 else -1 for k in cov.row.tolist()],
            "evidence": [plugin_text(str(e), "json", 300) for e in p["evidence"]],  # the attack's words: one bounded line each
        }
        for name, p in found.items()
    }
    owners = referee.truth_for(np.asarray(ids))
    rounds = np.asarray([int(r) for r in referee.field_for(np.asarray(ids), "round")])
    m = probe_metrics(aligned, ids, owners, rounds, len(set(owners)), ctx.cfg.fl.rounds)
    m |= cov.report()
    m["notes"] = [cov.note("missing entries count as no guess (wrong), not as a random one")]
    m["best_owner_accuracy"] = max((p["owner_accuracy"] for p in m["probes"].values()), default=0.0)
    m["best_round_accuracy"] = max((p["round_accuracy"] for p in m["probes"].values()), default=0.0)
    rows = [[n, f"{100 * p['owner_accuracy']:.1f}", f"{100 * p['round_accuracy']:.1f}", "; ".join(p["evidence"][:2]) or "nothing"]
            for n, p in m["probes"].items()]
    m["breakout"] = {name: bool(p["held"]) for name, p in breakout.items()}
    m["breakout_held"] = all(m["breakout"].values())
    m["tables"] = {
        f"Red team: each probe's owner / round accuracy in % (chance {100 * m['owner_chance']:.1f} / "
        f"{100 * m['round_chance']:.1f})": {"header": ["probe", "owner", "round", "found"], "rows": rows},
        "Red team: break-out probes from inside a worker": {
            "header": ["probe", "held", "detail"],
            "rows": [[plugin_text(n, "json", 80), "yes" if p["held"] else "NO", plugin_text(str(p["detail"]), "json", 160)]
                     for n, p in breakout.items()],
        },
    }
    return m
