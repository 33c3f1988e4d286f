"""The per-user data every source is loaded into.

Every example has an owner; a source yields one ``UserData`` per user, and the rest of the
testbed (splits, clients, the attacker's prior) only ever sees this form.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

Task = Literal["multiclass", "multilabel", "next-token"]
# What ``UserData.t`` is: real capture times, or only the examples' order in the source (no timestamps),
# which a chrono prior may use only where the experiment opts in (split.chrono_row_order).
TimeKind = Literal["timestamps", "row order"]


@dataclass(frozen=True)
class UserData:
    """One user's examples, aligned on the first axis.

    ``x``: float32 images (n, C, H, W) in [0, 1], or int64 token windows (n, L).
    ``y``: int64 classes (n,), float32 multi-hot (n, K), or int64 next tokens (n, L).
    ``t``: float64 capture time (or album index) per example; chrono priors sort by it.
    ``attrs``: per-example attribute columns, each (n,).
    """

    x: np.ndarray
    y: np.ndarray
    t: np.ndarray
    attrs: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.x)
        if len(self.y) != n or len(self.t) != n or any(len(v) != n for v in self.attrs.values()):
            raise ValueError("UserData fields must have the same length")

    def __len__(self) -> int:
        return len(self.x)

    def take(self, idx: np.ndarray) -> UserData:
        """The examples at ``idx``, in that order."""
        return UserData(self.x[idx], self.y[idx], self.t[idx], {k: v[idx] for k, v in self.attrs.items()})


@dataclass(frozen=True)
class Corpus:
    """A per-user dataset: users in a fixed order with their data and the task they support."""

    name: str
    task: Task
    num_classes: int  # classes, labels, or vocabulary size for next-token
    input_shape: tuple[int, ...]  # one example's x shape
    users: Mapping[str, UserData]  # a dict, or core.data.lazy_users.LazyUsers for generated sources
    vocab: tuple[str, ...] | None = None
    time: TimeKind = "timestamps"  # what each example's t holds

    @property
    def user_ids(self) -> list[str]:
        return list(self.users)
