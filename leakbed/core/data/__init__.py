"""Per-user data: load a source, filter users, split each into prior / private / test.

``federation(cfg, rule)`` (or ``federation_of`` with the data and split sections, as a device's plan
holds them) is the single entry point; it is cached per process because every ClientApp, the
attacker's shadow-update worker and the server's utility evaluation rebuild the same deterministic
federation from the frozen config.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from leakbed.core.config import DataConfig, ExperimentConfig, SplitConfig
from leakbed.core.data.corpus import Corpus, Task, UserData
from leakbed.core.data.errors import DataError
from leakbed.core.data.split import Splits, UserSplit, filter_users

__all__ = ["Corpus", "DataError", "Federation", "Task", "UserData", "UserSplit", "federation", "federation_of", "load_corpus"]


def clear_cache() -> None:
    """Forget the federations built so far (a test that measures a fresh build)."""
    _FEDERATIONS.clear()


def load_corpus(cfg: DataConfig, seed: int) -> Corpus:
    """Read the configured source into a Corpus (not yet filtered or split)."""
    if cfg.source == "synthetic":
        from leakbed.core.data.synthetic import generate

        return generate(cfg.synthetic, seed)
    if cfg.source == "leaf":
        from leakbed.core.data.leaf import load_leaf

        return load_leaf(cfg.path, image_size=cfg.image_size)
    if cfg.source == "tff-hdf5":
        from leakbed.core.data.tff_hdf5 import load_tff_hdf5

        return load_tff_hdf5(cfg.path, seq_len=cfg.seq_len)
    if cfg.source == "table":
        from leakbed.core.data.table import load_table

        return load_table(cfg.path, image_size=cfg.image_size, seq_len=cfg.seq_len, vocab_size=cfg.vocab_size)
    if cfg.source == "flwr-datasets":
        from leakbed.core.data.natural_id import load_flwr_datasets

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


def check_time(corpus: Corpus, rule: str, source: str, split: SplitConfig) -> None:
    """A chrono prior means "the attacker knows the user's past": on data whose t is only the row order
    that claim is the file's order, so it takes the experiment's explicit opt-in."""
    if rule == "chrono" and corpus.time == "row order" and not split.chrono_row_order:
        raise DataError(
            f"split.priors: 'chrono' needs timestamps and {source} data {corpus.name!r} has none "
            "(its t is the row order); set split.chrono_row_order = true to use row order"
        )


_FEDERATIONS: OrderedDict[tuple[str, str, int, str], Federation] = OrderedDict()
_CACHED = 4  # federations kept per process: a sweep's points (which differ in defenses, rounds, attacks) load a dataset once


def _build(data: DataConfig, split: SplitConfig, seed: int, rule: str) -> Federation:
    corpus = filter_users(load_corpus(data, seed), min_examples=data.min_examples, max_users=data.max_users)
    if len(corpus.users) < 2:
        raise DataError(f"only {len(corpus.users)} user(s) have at least {data.min_examples} examples; need 2 or more")
    check_time(corpus, rule, data.source, split)
    splits = Splits(corpus, rule, seed=seed, prior_fraction=split.prior_fraction, prior_count=split.prior_count,
                    test_fraction=data.test_fraction, private_count=split.private_count)
    return Federation(corpus=corpus, rule=rule, splits=splits)


def federation_of(data: DataConfig, split: SplitConfig, seed: int, rule: str) -> Federation:
    """The deterministic federation of these data and split settings under prior rule ``rule`` (cached by
    what shapes it only; built from the given, already validated settings)."""
    key = (data.model_dump_json(), split.model_dump_json(), seed, rule)
    if key in _FEDERATIONS:
        _FEDERATIONS.move_to_end(key)
        return _FEDERATIONS[key]
    fed = _build(data, split, seed, rule)
    _FEDERATIONS[key] = fed
    while len(_FEDERATIONS) > _CACHED:
        _FEDERATIONS.popitem(last=False)
    return fed


def federation(cfg: ExperimentConfig, rule: str) -> Federation:
    """The deterministic federation for ``cfg`` under prior rule ``rule``."""
    return federation_of(cfg.data, cfg.split, cfg.seed, rule)
