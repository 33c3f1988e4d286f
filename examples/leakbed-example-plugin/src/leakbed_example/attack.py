"""``bias-labels``: which classes a device trained on, read from the output-layer bias of its anonymous update.

Source: Zhao et al. 2020, "iDLG: Improved Deep Leakage from Gradients", §3: the gradient of the cross-entropy loss
on the output bias is p_c - y_c, negative for the classes present in the batch; seed 004 §3.2 reads a batch's
labels from the same gradient. Under FedAvg the device's update Δw = w_global - w_local sums η·gradient over its
local steps, so the bias entries of the classes it holds most are the most negative.

Threat model: the honest-but-curious server. It receives each anonymous update's full Δw (for its output bias)
from the shuffler, and nothing else: no prior data, no identity.

Its code runs in a sandbox of its own (its lane): ``ctx.store`` is its inputs, read-only; ``predict`` returns its
outputs (``ids``, ``scores``), which go back to leakbed through a pipe and are checked before the scorer reads them.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from pydantic import Field

from leakbed.plugin import Attack, AttackContext, Needs, Outputs, Params, Scoring


class BiasLabelsParams(Params):
    top_k: int = Field(
        1, ge=1, le=1000, description="classes named per update; a hit is the device's main class among them [classes]"
    )


class BiasLabels(Attack[BiasLabelsParams]):
    """Rank every anonymous update's classes by how far its output bias moved down."""

    name: ClassVar[str] = "bias-labels"
    needs = Needs(tasks=frozenset({"multiclass"}), full_updates=True)
    source = "Zhao et al. 2020 (iDLG) §3: labels from the output-bias gradient; seed 004 §3.2 reads labels the same way"
    threat = "the honest-but-curious server: each anonymous update's full Δw (its output-layer bias), from the shuffler"
    # scored by its own function, in the scoring sandbox, which gets only the truth field it names here
    scorer = Scoring(kind="plugin", function="leakbed_example.scoring:score", truth=("label-share",))

    def predict(self, ctx: AttackContext[BiasLabelsParams]) -> Outputs:
        classes = ctx.knowledge.corpus_meta.num_classes
        anon = ctx.store.read_anon()
        ids = [str(i) for i in anon["ids"]]
        scores = np.zeros((len(ids), classes))
        row = {uid: n for n, uid in enumerate(ids)}
        for rnd in sorted({int(r) for r in anon["round"]}):
            for uid, delta in ctx.store.read_anon_full(rnd).items():
                bias = output_bias(delta, classes)
                if uid in row:
                    scores[row[uid]] = -bias  # Δw = η·Σ(p - y): the held classes move most negative
        jitter = np.random.default_rng(ctx.seed).random(scores.shape) * 1e-12  # no signal: a random ranking, not ties
        return {"ids": np.asarray(ids), "scores": scores + jitter}


def output_bias(delta: dict[str, np.ndarray], classes: int) -> np.ndarray:
    """The Δ of the output layer's bias: the last bias with one entry per class."""
    found = [v for k, v in delta.items() if k.endswith("bias") and np.asarray(v).shape == (classes,)]
    if not found:
        raise ValueError(f"no output bias of {classes} entries in the update")
    return np.asarray(found[-1], np.float64)
