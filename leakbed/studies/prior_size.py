"""Re-identification by the number of prior examples per user (seed 001 §6.2.1, Figure 7): the
attacker's shadow updates are replayed on every stored global model from only k of each user's
prior examples (a seeded random subset), and the attacker tested on the run's anonymous updates."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from leakbed.core.tables import markdown_table
from leakbed.studies.plots import write
from leakbed.studies.run_view import RunView, flat
from leakbed.studies.size_curve import reid_by_size, size_figure


def run(view: RunView, out: Path, sizes: list[int] | None = None, every: int = 1) -> dict:
    keys = view.keys()
    prior = view.fed.prior()
    most = min(len(d) for d in prior.values())
    sizes = sorted({s for s in (sizes or [1, 2, 4, 8, 16, 32]) if s <= most} | {most})
    rounds = view.rounds[::every]
    rng = np.random.default_rng([view.cfg.seed, 0x0F7])

    def replayed(k: int) -> tuple[np.ndarray, np.ndarray]:
        xs, ys = [], []
        for user, data in prior.items():
            sub = data.take(np.sort(rng.choice(len(data), k, replace=False)))
            for rnd in rounds:
                xs.append(flat(view.replay(sub, rnd, f"{user}/prior{k}"), keys))
                ys.append(user)
        return np.stack(xs), np.asarray(ys)

    result, rows = reid_by_size(view, "prior-size", sizes, replayed)
    result["rounds"] = rounds
    intro = (
        f"Seed 001 Figure 7: AP % (× chance) of the {view.attacker} attacker whose shadow updates are "
        f"replayed from k prior examples per user on {len(rounds)} stored global models, tested on the run's anonymous updates."
    )
    write(out, "prior_size", "Re-identification by prior examples per user (seed 001 Figure 7)", intro,
          markdown_table(["prior examples per user", "AP % (× chance)", "top-1 %"], rows), result,
          size_figure(result, "prior examples per user"))  # fmt: skip
    return result
