"""The referee side of ``bias-labels``: does an update name the class its device holds most?

The truth is each device's ``label-share`` (the share of each class in its private data), which the device
sealed for the referee. Chance is guessing, for every update, the ``top_k`` classes that are most often a
device's main class (the best guess without the update).
"""

from __future__ import annotations

import numpy as np

from leakbed.plugin import ScoreContext


def score(ctx: ScoreContext) -> dict:
    out, k = ctx.outputs, ctx.params.top_k
    share = np.asarray(ctx.truth.field_for(out["ids"], "label-share"), np.float64)
    main = share.argmax(axis=1)
    named = np.argsort(-out["scores"], axis=1)[:, :k]
    accuracy = float((named == main[:, None]).any(axis=1).mean())
    counts = np.bincount(main, minlength=share.shape[1])
    chance = float(np.sort(counts)[::-1][:k].sum() / len(main))
    return {
        "accuracy": accuracy,
        "chance": chance,
        "x_chance": accuracy / chance,
        "updates": int(len(main)),
        "top_k": k,
        "notes": [
            f"bias-labels (example plugin): the device's main class among the update's top {k} in "
            f"{100 * accuracy:.1f}% of {len(main)} updates (chance {100 * chance:.1f}%)."
        ],
    }
