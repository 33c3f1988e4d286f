"""Vocabulary restriction (seed 002 §7.3.2, "dimensionality reduction"): a device only uses the k
most frequent tokens of a pre-defined vocabulary of common words, as Google's keyboard uses a fixed
vocabulary of 5,000 words.

Training level: tokens outside the k most frequent become ``<unk>`` in the device's data, so the
embedding rows of rare tokens (which would reveal that a user typed them) get no gradient.
Update level (a Flower Mod): every parameter indexed by the vocabulary (embedding rows, and the
output layer's rows of a language model) is sent at the global value outside the allowed tokens,
so those rows of Δw are exactly zero. The "common words" are counted over the federation's data
(the same counts that built the corpus vocabulary). Threat model: the curious server learns only
which common tokens a device used.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from flwr.clientapp.typing import Mod
from pydantic import Field

from leakbed.core.data import UserData
from leakbed.core.data.corpus import Corpus
from leakbed.defenses.contract import Defense, DefenseSetting, DeviceContext, Params
from leakbed.defenses.mod_reply import keep_global
from leakbed.defenses.update_mods import reply_mod


def _is_special(token: str) -> bool:
    return token.startswith("<") and token.endswith(">") and len(token) > 2


def allowed_tokens(corpus: Corpus, k: int) -> np.ndarray:
    """Boolean mask over the vocabulary: the special tokens and the k most frequent others (ties by id)."""
    if corpus.vocab is None:
        raise ValueError(f"the vocab defense needs token data; corpus {corpus.name} has none")
    size = len(corpus.vocab)
    counts = np.zeros(size, np.int64)
    for data in corpus.users.values():
        counts += np.bincount(data.x.ravel(), minlength=size)[:size]
        if corpus.task == "next-token":
            counts += np.bincount(data.y.ravel(), minlength=size)[:size]
    special = np.array([_is_special(t) for t in corpus.vocab])
    allowed = special.copy()
    others = np.flatnonzero(~special)
    if k <= 0 or k >= len(others):
        allowed[:] = True
        return allowed
    order = others[np.lexsort((others, -counts[others]))]
    allowed[order[:k]] = True
    return allowed


_ALLOWED: dict[tuple[str, int], np.ndarray] = {}


def allowed_of(ctx: DeviceContext, k: int) -> np.ndarray:
    """``allowed_tokens`` of the device's federation (cached per process)."""
    key = (ctx.plan.model_dump_json(include={"seed", "rule", "data", "split"}), k)
    if key not in _ALLOWED:
        _ALLOWED[key] = allowed_tokens(ctx.federation.corpus, k)
    return _ALLOWED[key]


def unk_id(corpus: Corpus) -> int:
    return corpus.vocab.index("<unk>") if corpus.vocab and "<unk>" in corpus.vocab else 0


def restrict_data(data: UserData, allowed: np.ndarray, unk: int, next_token: bool) -> UserData:
    """Tokens outside ``allowed`` become ``unk`` in x (and in the targets of a language model)."""
    x = np.where(allowed[data.x], data.x, unk)
    y = np.where(allowed[data.y], data.y, unk) if next_token else data.y
    return UserData(x=x, y=y, t=data.t, attrs=data.attrs)


def restrict_update(
    global_arrays: dict[str, np.ndarray], local_arrays: dict[str, np.ndarray], allowed: np.ndarray
) -> dict[str, np.ndarray]:
    """Rows of vocabulary-indexed parameters (first axis = vocabulary size) outside ``allowed`` keep the global value."""
    out = dict(local_arrays)
    for key, glob in global_arrays.items():
        if np.issubdtype(glob.dtype, np.floating) and glob.ndim >= 1 and glob.shape[0] == len(allowed):
            mask = allowed.reshape((-1,) + (1,) * (glob.ndim - 1))
            out[key] = keep_global(local_arrays[key], glob, mask)
    return out


class VocabParams(Params):
    tokens: int = Field(1000, ge=0, le=1_000_000, description="k most frequent tokens a device uses; 0 = all [tokens]")


class Vocabulary(Defense):
    """Training level: tokens outside the k most frequent become <unk> in the device's data (after the other data
    defenses). Update level (the innermost Mod, on the raw update): vocabulary-indexed rows outside them are sent
    at the global value."""

    name: ClassVar[str] = "vocab"
    params = VocabParams
    data_stage = 30
    mod_stage = 10
    source = "seed 002 §7.3.2 (dimensionality reduction)"
    threat = "the curious server: it learns only which common tokens a device used"

    def check(self, params: VocabParams, setting: DefenseSetting) -> str | None:
        if setting.corpus.vocab is None:
            return f"vocab needs token data (text); corpus {setting.corpus.name} has none"
        return None

    def data(self, ctx: DeviceContext, params: VocabParams, data: UserData) -> UserData:
        if not params.tokens:
            return data
        corpus = ctx.federation.corpus
        return restrict_data(data, allowed_of(ctx, params.tokens), unk_id(corpus), corpus.task == "next-token")

    def mod(self, ctx: DeviceContext, params: VocabParams) -> Mod | None:
        if not params.tokens:
            return None
        allowed = allowed_of(ctx, params.tokens)
        return reply_mod(lambda glob, local: restrict_update(glob, local, allowed))
