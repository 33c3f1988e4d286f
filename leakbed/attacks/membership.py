"""Membership inference from the embedding layer (seed 002 §7.1.3, §7.2.2, Table 7.2).

Threat model: the curious server sees each anonymous update in full. For a text model, the rows of
the embedding matrix that an update changes are exactly the tokens in its batches, so every update
reveals its batch vocabulary V_t. A record r with tokens V_r is declared a member of update t's
batch iff V_r ⊆ V_t: recall is 1 by construction (a member's tokens are all in its batch), and
precision falls as batches grow and cover more of the vocabulary. The padding token is left out of
V_r because an embedding with ``padding_idx`` never updates its row, and so is, for a next-token
window, every token after the last real target: a padded window's last word is only ever a target
and gets no embedding gradient (found when the federation's recall came out 0.81, not 1).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from leakbed.attacks.contract import Attack, AttackContext, Needs, NoParams, Outputs, Setting
from leakbed.attacks.gradient_features import embedding_key, embedding_tokens
from leakbed.attacks.property_passive import anon_rounds
from leakbed.core.store import UpdateStore
from leakbed.core.vocabulary_sets import is_member as is_member  # re-exported
from leakbed.core.vocabulary_sets import record_tokens as record_tokens  # re-exported

NAME = "membership"
def batch_vocabularies(store: UpdateStore) -> tuple[list[str], list[int], np.ndarray]:
    """(update ids, rounds, boolean (updates, vocab)) from the stored full updates."""
    ids, rounds, rows = [], [], []
    for rnd in anon_rounds(store):
        for uid, delta in sorted(store.read_anon_full(rnd).items()):
            key = embedding_key(delta)
            if key is None:
                raise ValueError("membership inference needs a model with a token embedding (a text model)")
            ids.append(uid)
            rounds.append(rnd)
            rows.append(embedding_tokens(delta, key))
    return ids, rounds, np.stack(rows) if rows else np.zeros((0, 0), bool)


class Membership(Attack):
    name: ClassVar[str] = NAME
    # text models carry the token embedding; the referee scores against the records each update's batches used
    needs = Needs(modality="text", full_updates=True, records=True)
    source = "seed 002 §7.1.3, §7.2.2, Table 7.2"
    threat = "the curious server: each anonymous update in full (its embedding rows reveal the batch vocabulary)"
    scorer = "membership"

    @classmethod
    def check(cls, params: NoParams, setting: Setting) -> str | None:
        if not any(n.endswith("embedding.weight") for n in setting.parameters):
            return "attack.suite 'membership' needs a text model with a token embedding (lstm-lm / lstm-classifier)"
        return None

    def predict(self, ctx: AttackContext) -> Outputs:
        ids, rounds, vocab = batch_vocabularies(ctx.store)
        return {
            "ids": np.asarray(ids),
            "rounds": np.asarray(rounds),
            "vocab": np.packbits(vocab, axis=1),
            "vocab_size": np.asarray(vocab.shape[1]),
        }
