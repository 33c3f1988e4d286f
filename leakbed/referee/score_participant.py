"""The referee's view of participant attacks: active property inference by adversarial devices
(seed 002 §7.1.5, §7.2.5, Figure 7.6a), reported apart from the server's attacks.

Each adversarial device seals, with its own update of round t, its score for round t − 1: how
likely the other participants' batches of round t − 1 held the property. The referee joins those
scores with the other devices' sealed ``has-property`` facts of that round (adversaries excluded)
and reports ROC AUC against 0.5 chance.

Sets: the adversary is leakbed's own device code (``client.adversary``), not a plugin, and it scores every round after
one it took part in: which rounds it observes is the protocol's sampling, not its choice.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

from leakbed.core.config import ExperimentConfig
from leakbed.referee.truth import Referee


def _records(referee_folder: Path) -> list[dict]:
    return Referee.load(referee_folder).records()


def score_participants(referee_folder: Path, cfg: ExperimentConfig) -> dict:
    """AUC of the adversarial participants' per-round scores against whether any other participant's
    batches held the property in that round."""
    adversaries = set(cfg.adversary.users)
    records = _records(referee_folder)
    by_round: dict[int, list[dict]] = {}
    for rec in records:
        by_round.setdefault(int(rec["round"]), []).append(rec)
    scores, truth, fractions, rounds = [], [], [], []
    for rec in records:
        if "adv-score" not in rec:
            continue
        observed = int(rec["adv-round"])
        others = [o for o in by_round.get(observed, []) if o["user_id"] not in adversaries]
        if not others or any("has-property" not in o for o in others):
            continue
        scores.append(float(rec["adv-score"]))
        truth.append(int(any(int(o["has-property"]) for o in others)))
        fractions.append(float(np.mean([float(o.get("property-fraction", 0.0)) for o in others])))
        rounds.append(observed)
    out: dict = {
        "attack": "active-property",
        "threat_model": "adversarial participant (a device), not the server",
        "adversaries": sorted(adversaries),
        "alpha": cfg.adversary.alpha,
        "observations": len(scores),
        "positive_rounds": int(sum(truth)),
        "chance": 0.5,
    }
    if len(set(truth)) == 2:
        out["auc"] = float(roc_auc_score(truth, scores))
        pos = np.asarray(scores)[np.asarray(truth) == 1]
        neg = np.asarray(scores)[np.asarray(truth) == 0]
        out["mean_score_with"] = float(pos.mean())
        out["mean_score_without"] = float(neg.mean())
    else:
        out["auc"] = None
        out["notes"] = [
            "AUC undefined: every observed round had the same truth (all or none of the other participants' "
            "batches held the property); use a rarer property or data.property_plan"
        ]
    out["per_round"] = {
        str(r): {"score": s, "truth": t, "others_fraction": f}
        for r, s, t, f in zip(rounds, scores, truth, fractions, strict=True)
    }
    return out
