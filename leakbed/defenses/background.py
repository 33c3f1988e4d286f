"""Background data for the augmentation defenses (seed 001 §7: "blend into the crowd").

Sources: a separate synthetic population (same class templates, other users), or the corpus'
own users who are not in the federation (e.g. FEMNIST writers left out), or a table given by
path. Everything is loaded by the same loaders, so it is preprocessed exactly like users' data.
"""

from __future__ import annotations

import numpy as np

from leakbed.core.config import BackgroundConfig, DataConfig, SplitConfig
from leakbed.core.data import DataError, UserData, federation_of, load_corpus
from leakbed.core.data.corpus import Corpus


def pool_users(users: list[UserData]) -> UserData:
    """All examples of several users as one unlabelled-by-owner pool, with the per-example attributes
    every one of them has (an adversarial participant's auxiliary data needs the property)."""
    shared = set.intersection(*(set(u.attrs) for u in users)) if users else set()
    return UserData(
        x=np.concatenate([u.x for u in users]),
        y=np.concatenate([u.y for u in users]),
        t=np.concatenate([u.t for u in users]),
        attrs={k: np.concatenate([u.attrs[k] for u in users]) for k in sorted(shared)},
    )


def _outside_users(background: BackgroundConfig, corpus: Corpus, members: set[str]) -> list[UserData]:
    outside = [d for u, d in corpus.users.items() if u not in members]
    if not outside:
        raise DataError("background: no users outside the federation; set background.source")
    return outside[: background.users]


def _build(background: BackgroundConfig, data: DataConfig, split: SplitConfig, seed: int, rule: str) -> UserData:
    source = background.source
    if source == "auto":
        source = "synthetic" if data.source == "synthetic" else "outside"
    if source == "synthetic":
        from leakbed.core.data.synthetic import generate

        population = data.synthetic.model_copy(update={"users": background.users})
        return pool_users(list(generate(population, seed, first_user=1_000_000).users.values()))
    if source == "table":
        from leakbed.core.data.table import load_table

        corpus = load_table(background.path, image_size=data.image_size, seq_len=data.seq_len, vocab_size=data.vocab_size)
        return pool_users(list(corpus.users.values()))
    members = set(federation_of(data, split, seed, rule).user_ids)
    return pool_users(_outside_users(background, load_corpus(data, seed), members))


_POOLS: dict[tuple[str, str, str, int, str], UserData] = {}


def background_pool(background: BackgroundConfig, data: DataConfig, split: SplitConfig, seed: int, rule: str) -> UserData:
    """The background pool of these settings (cached per process, by what shapes it)."""
    key = (background.model_dump_json(), data.model_dump_json(), split.model_dump_json(), seed, rule)
    if key not in _POOLS:
        if len(_POOLS) >= 2:
            _POOLS.pop(next(iter(_POOLS)))
        _POOLS[key] = _build(background, data, split, seed, rule)
    return _POOLS[key]
