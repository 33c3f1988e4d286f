"""Split each user's data into the attacker's prior, the device's private data and a test share.

Seed 001 §5.2.2: prior and private are disjoint samples of a user's data, drawn either at random
or chronologically (the prior precedes the private data in time). A held-out test share of the
non-prior data measures the global model's utility (seed 001 §5.3 holds out 20%).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from leakbed.core.data.corpus import Corpus, UserData
from leakbed.core.data.lazy_users import subset, user_sizes


@dataclass(frozen=True)
class UserSplit:
    """A user's prior, private and test examples, kept as positions in the user's data and taken on
    access: a process holding a federation (the server, every ClientApp actor) then keeps one copy
    of the corpus instead of two, which is what memory grew with in the number of clients."""

    data: UserData
    prior_idx: np.ndarray
    private_idx: np.ndarray
    test_idx: np.ndarray

    @property
    def prior(self) -> UserData:
        return self.data.take(self.prior_idx)

    @property
    def private(self) -> UserData:
        return self.data.take(self.private_idx)

    @property
    def test(self) -> UserData:
        return self.data.take(self.test_idx)


def prior_size(n: int, fraction: float, count: int) -> int:
    """Prior examples for a user of ``n``; at least one stays on the device."""
    k = count if count > 0 else int(round(n * fraction))
    return int(min(max(k, 1), n - 1))


def split_user(
    data: UserData,
    rule: str,
    *,
    prior_fraction: float,
    prior_count: int,
    test_fraction: float,
    rng: np.random.Generator,
    private_count: int = 0,
) -> UserSplit:
    """Order a user's examples by ``rule``, take the prior first, hold out a test share of the rest; the device keeps
    the rest, or its first ``private_count`` in a random order (the size of a device's local data set)."""
    n = len(data)
    if rule == "random":
        order = rng.permutation(n)
    elif rule == "chrono":
        order = np.argsort(data.t, kind="stable")
    else:
        raise ValueError(f"unknown prior rule {rule!r}")
    k = prior_size(n, prior_fraction, prior_count)
    rest = rng.permutation(order[k:])
    n_test = int(round(len(rest) * test_fraction))
    n_test = min(n_test, len(rest) - 1)
    private = rest[n_test:][:private_count] if private_count else rest[n_test:]
    return UserSplit(data, prior_idx=np.sort(order[:k]), private_idx=np.sort(private), test_idx=np.sort(rest[:n_test]))


def filter_users(corpus: Corpus, *, min_examples: int, max_users: int) -> Corpus:
    """Drop users below ``min_examples`` (as the seeds do), then keep the first ``max_users``."""
    kept = [u for u, n in user_sizes(corpus.users).items() if n >= min_examples]
    if max_users:
        kept = kept[:max_users]
    users = subset(corpus.users, kept)
    return Corpus(corpus.name, corpus.task, corpus.num_classes, corpus.input_shape, users, corpus.vocab, corpus.time)


class Splits(Mapping[str, UserSplit]):
    """Every user's split, in the corpus' order, made on access from the user's data and an rng of the
    experiment seed and the user's position: a process that reads one user (a device) makes only
    that user's data when the corpus is lazy (``core.data.lazy_users``)."""

    def __init__(self, corpus: Corpus, rule: str, *, seed: int, prior_fraction: float, prior_count: int,
                 test_fraction: float, private_count: int = 0) -> None:
        self._users = corpus.users
        self._position = {u: i for i, u in enumerate(corpus.users)}
        self._rule, self._seed = rule, seed
        self._shares = dict(
            prior_fraction=prior_fraction, prior_count=prior_count, test_fraction=test_fraction, private_count=private_count
        )

    def __getitem__(self, user: str) -> UserSplit:
        rng = np.random.default_rng([self._seed, self._position[user], 7])
        return split_user(self._users[user], self._rule, rng=rng, **self._shares)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[str]:
        return iter(self._position)

    def __len__(self) -> int:
        return len(self._position)

    def __contains__(self, user: object) -> bool:
        return user in self._position
