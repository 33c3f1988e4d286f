"""Per-user data: load a source, filter users, split each into prior / private / test.

``federation(cfg, rule)`` is the single entry point; it is cached per process because every
ClientApp, the attacker's shadow-update worker and the server's utility evaluation rebuild the
same deterministic federation from the frozen config.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from core.config import DataConfig, ExperimentConfig
from core.data.corpus import Corpus, Task, UserData
from core.data.errors import DataError
from core.data.split import Splits, UserSplit, filter_users

__all__ = ["Corpus", "DataError", "Federation", "Task", "UserData", "UserSplit", "federation", "load_corpus"]


def load_corpus(cfg: DataConfig, seed: int) -> Corpus:
    """Read the configured source into a Corpus (not yet filtered or split)."""
    if cfg.source == "synthetic":
        from core.data.synthetic import generate

        return generate(cfg.synthetic, seed)
    if cfg.source == "leaf":
        from core.data.leaf import load_leaf

        return load_leaf(cfg.path, image_size=cfg.image_size)
    if cfg.source == "tff-hdf5":
        from core.data.tff_hdf5 import load_tff_hdf5

        return load_tff_hdf5(cfg.path, seq_len=cfg.seq_len)
    if cfg.source == "table":
        from core.data.table import load_table

        return load_table(cfg.path, image_size=cfg.image_size, seq_len=cfg.seq_len, vocab_size=cfg.vocab_size)
    if cfg.source == "flwr-datasets":
        from core.data.natural_id import load_flwr_datasets

        return load_flwr_datasets(cfg.path, partition_by=cfg.partition_by, image_size=cfg.image_size)
    raise DataError(f"unknown data source {cfg.source!r}")


@dataclass(frozen=True)
class Federation:
    """The users of one FL run, in partition order, with their splits."""

    corpus: Corpus
    rule: str
    splits: Mapping[str, UserSplit]  # made on access (core.data.split.Splits)

    @property
    def user_ids(self) -> list[str]:
        return list(self.splits)

    def private(self, partition_id: int) -> UserData:
        """A device's own data, by the partition id its SuperNode was started with."""
        return self.splits[self.user_ids[partition_id]].private

    def prior(self) -> dict[str, UserData]:
        """The attacker's knowledge: prior data keyed by the identities it knows."""
        return {u: s.prior for u, s in self.splits.items()}

    def test_set(self) -> UserData:
        """All users' held-out examples, pooled, to measure the global model's utility."""
        parts = [s.test for s in self.splits.values() if len(s.test)]
        attrs = {k: np.concatenate([p.attrs[k] for p in parts]) for k in parts[0].attrs} if parts else {}
        return UserData(
            x=np.concatenate([p.x for p in parts]),
            y=np.concatenate([p.y for p in parts]),
            t=np.concatenate([p.t for p in parts]),
            attrs=attrs,
        )


def check_time(corpus: Corpus, rule: str, cfg: ExperimentConfig) -> None:
    """A chrono prior means "the attacker knows the user's past": on data whose t is only the row order
    that claim is the file's order, so it takes the experiment's explicit opt-in."""
    if rule == "chrono" and corpus.time == "row order" and not cfg.split.chrono_row_order:
        raise DataError(
            f"split.priors: 'chrono' needs timestamps and {cfg.data.source} data {corpus.name!r} has none "
            "(its t is the row order); set split.chrono_row_order = true to use row order"
        )


@functools.lru_cache(maxsize=4)
def _federation(data_json: str, split_json: str, seed: int, rule: str) -> Federation:
    """Keyed by what shapes the federation only, so a sweep's points (which differ in defenses,
    rounds, attacks) load a dataset once per process."""
    cfg = ExperimentConfig.model_validate({"seed": seed, "data": json.loads(data_json), "split": json.loads(split_json)})
    corpus = filter_users(load_corpus(cfg.data, cfg.seed), min_examples=cfg.data.min_examples, max_users=cfg.data.max_users)
    if len(corpus.users) < 2:
        raise DataError(f"only {len(corpus.users)} user(s) have at least {cfg.data.min_examples} examples; need 2 or more")
    check_time(corpus, rule, cfg)
    split = cfg.split
    splits = Splits(corpus, rule, seed=cfg.seed, prior_fraction=split.prior_fraction, prior_count=split.prior_count,
                    test_fraction=cfg.data.test_fraction)
    return Federation(corpus=corpus, rule=rule, splits=splits)


def federation(cfg: ExperimentConfig, rule: str) -> Federation:
    """The deterministic federation for ``cfg`` under prior rule ``rule``."""
    return _federation(cfg.data.model_dump_json(), cfg.split.model_dump_json(), cfg.seed, rule)
