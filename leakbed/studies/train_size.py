"""Re-identification by the number of attacker training examples per user (seed 001 §6.2.1,
Figure 8): the MLP trained on a seeded random subset of n shadow updates per user, evaluated on
all anonymous updates. Reads the run's store only."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from leakbed.core.errors import LeakbedError
from leakbed.core.tables import markdown_table
from leakbed.studies.plots import write
from leakbed.studies.run_view import RunView
from leakbed.studies.size_curve import reid_by_size, size_figure


def run(view: RunView, out: Path, sizes: list[int] | None = None) -> dict:
    sx, sy, _ = view.store.read_shadow()
    if not len(sx):
        raise LeakbedError(f"{view.prior_dir}: the store holds no shadow updates")
    most = int(min(np.unique(sy, return_counts=True)[1]))
    sizes = sorted({s for s in (sizes or [1, 2, 4, 8, 16, 32, 64]) if s <= most} | {most})
    rng = np.random.default_rng([view.cfg.seed, 0x0F8])

    def subset(n: int) -> tuple[np.ndarray, np.ndarray]:
        idx = np.concatenate([rng.choice(np.flatnonzero(sy == u), n, replace=False) for u in np.unique(sy)])
        return sx[idx], sy[idx]

    result, rows = reid_by_size(view, "train-size", sizes, subset)
    intro = (
        f"Seed 001 Figure 8: AP % (× chance) of the {view.attacker} attacker trained on n shadow updates "
        "per user (a seeded random subset across rounds), tested on every anonymous update."
    )
    write(out, "train_size", "Re-identification by attacker training examples (seed 001 Figure 8)", intro,
          markdown_table(["updates per user", "AP % (× chance)", "top-1 %"], rows), result,
          size_figure(result, "attacker training updates per user"))  # fmt: skip
    return result
