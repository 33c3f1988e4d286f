"""The scorer of ``bias-labels``: does an update name the class its device holds most?

It runs in leakbed's scoring sandbox (``Scoring(kind="plugin", ...)`` in ``attack.py``), which holds only the
attack's outputs as leakbed checked them, its parameters, the ids of every update it was given (``ctx.given``) and
the one truth field it declared: each device's ``label-share`` (the share of each class in its private data), which
the device sealed for the referee. It scores every given update: one the attack returned no usable row for ranks
the classes at random. Chance is guessing, for every update, the ``top_k`` classes that are most often a device's
main class (the best guess without the update).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from leakbed.plugin import ScoreContext

if TYPE_CHECKING:  # its parameters' type only: the scoring sandbox need not import the attack
    from leakbed_example.attack import BiasLabelsParams


def score(ctx: ScoreContext[BiasLabelsParams]) -> dict[str, Any]:
    out, k = ctx.outputs, ctx.params.top_k
    given = [str(i) for i in ctx.given]
    if not given:
        return {"updates": 0, "notes": ["bias-labels (example plugin): no update to score."]}
    share = np.asarray(ctx.truth.field_for(given, "label-share"), np.float64)
    main = share.argmax(axis=1)
    row = {str(i): n for n, i in enumerate(out["ids"])}
    scores = np.asarray(out["scores"], np.float64)
    usable = [uid in row and np.isfinite(scores[row[uid]]).all() for uid in given]
    rng = np.random.default_rng(0)  # a missing or non-finite row: a random ranking of the classes
    ranked = np.stack([scores[row[uid]] if ok else rng.random(share.shape[1]) for uid, ok in zip(given, usable, strict=True)])
    named = np.argsort(-ranked, axis=1)[:, :k]
    accuracy = float((named == main[:, None]).any(axis=1).mean())
    counts = np.bincount(main, minlength=share.shape[1])
    chance = float(np.sort(counts)[::-1][:k].sum() / len(main))
    return {
        "accuracy": accuracy,
        "chance": chance,
        "x_chance": accuracy / chance,
        "updates": len(given),
        "coverage": float(np.mean(usable)),
        "rows_missing": len(given) - int(np.sum(usable)),
        "top_k": k,
        "notes": [
            f"bias-labels (example plugin): the device's main class among the update's top {k} in "
            f"{100 * accuracy:.1f}% of {len(given)} updates (chance {100 * chance:.1f}%)."
        ],
    }
