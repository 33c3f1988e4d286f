"""Background data for the augmentation defenses (seed 001 §7: "blend into the crowd").

Sources: a separate synthetic population (same class templates, other users), or the corpus'
own users who are not in the federation (e.g. FEMNIST writers left out), or a table given by
path. Everything is loaded by the same loaders, so it is preprocessed exactly like users' data.
"""

from __future__ import annotations

import functools

import numpy as np

from core.config import ExperimentConfig
from core.data import DataError, UserData, federation, load_corpus
from core.data.corpus import Corpus


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


def _outside_users(cfg: ExperimentConfig, corpus: Corpus, members: set[str]) -> list[UserData]:
    outside = [d for u, d in corpus.users.items() if u not in members]
    if not outside:
        raise DataError("background: no users outside the federation; set background.source")
    return outside[: cfg.background.users]


@functools.lru_cache(maxsize=2)
def _background(cfg_json: str, rule: str) -> UserData:
    cfg = ExperimentConfig.model_validate_json(cfg_json)
    source = cfg.background.source
    if source == "auto":
        source = "synthetic" if cfg.data.source == "synthetic" else "outside"
    if source == "synthetic":
        from core.data.synthetic import generate

        population = cfg.data.synthetic.model_copy(update={"users": cfg.background.users})
        return pool_users(list(generate(population, cfg.seed, first_user=1_000_000).users.values()))
    if source == "table":
        from core.data.table import load_table

        corpus = load_table(
            cfg.background.path, image_size=cfg.data.image_size, seq_len=cfg.data.seq_len, vocab_size=cfg.data.vocab_size
        )
        return pool_users(list(corpus.users.values()))
    members = set(federation(cfg, rule).user_ids)
    return pool_users(_outside_users(cfg, load_corpus(cfg.data, cfg.seed), members))


def background_pool(cfg: ExperimentConfig, rule: str) -> UserData:
    """The background pool for this experiment (cached per process)."""
    return _background(cfg.model_dump_json(), rule)
