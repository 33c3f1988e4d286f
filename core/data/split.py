"""Split each user's data into the attacker's prior, the device's private data and a test share.

Seed 001 §5.2.2: prior and private are disjoint samples of a user's data, drawn either at random
or chronologically (the prior precedes the private data in time). A held-out test share of the
non-prior data measures the global model's utility (seed 001 §5.3 holds out 20%).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.data.corpus import Corpus, UserData


@dataclass(frozen=True)
class UserSplit:
    prior: UserData
    private: UserData
    test: UserData


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
) -> UserSplit:
    """Order a user's examples by ``rule``, take the prior first, hold out a test share of the rest."""
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
    return UserSplit(
        prior=data.take(np.sort(order[:k])),
        private=data.take(np.sort(rest[n_test:])),
        test=data.take(np.sort(rest[:n_test])),
    )


def filter_users(corpus: Corpus, *, min_examples: int, max_users: int) -> Corpus:
    """Drop users below ``min_examples`` (as the seeds do), then keep the first ``max_users``."""
    kept = {u: d for u, d in corpus.users.items() if len(d) >= min_examples}
    if max_users:
        kept = dict(list(kept.items())[:max_users])
    return Corpus(corpus.name, corpus.task, corpus.num_classes, corpus.input_shape, kept, corpus.vocab, corpus.time)
