"""Re-identification by the number of attacker training examples per user (seed 001 §6.2.1,
Figure 8): the MLP trained on a seeded random subset of n shadow updates per user, evaluated on
all anonymous updates. Reads the run's store only."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from leakbed.analyses.plots import pct, plt, table, write
from leakbed.analyses.run_view import RunView, reid


def run(view: RunView, out: Path, sizes: list[int] | None = None) -> dict:
    sx, sy, _ = view.store.read_shadow()
    ax, owners, _ = view.anon()
    if not len(sx):
        raise ValueError(f"{view.prior_dir}: the store holds no shadow updates")
    most = int(min(np.unique(sy, return_counts=True)[1]))
    sizes = sorted({s for s in (sizes or [1, 2, 4, 8, 16, 32, 64]) if s <= most} | {most})
    rng = np.random.default_rng([view.cfg.seed, 0x0F8])
    rows, result = [], {"sizes": sizes, "ap": [], "chance_ap": [], "x_chance": []}
    for n in sizes:
        idx = np.concatenate([rng.choice(np.flatnonzero(sy == u), n, replace=False) for u in np.unique(sy)])
        m = reid(view.cfg, sx[idx], sy[idx], ax, owners)
        result["ap"].append(m["ap"])
        result["chance_ap"].append(m["chance_ap"])
        result["x_chance"].append(m["x_chance"])
        rows.append([str(n), pct(m["ap"], m["chance_ap"]), f"{100 * m['top1']:.1f}"])
    fig, axis = plt.subplots(figsize=(5, 3.5))
    axis.plot(sizes, 100 * np.asarray(result["ap"]), "o-", label="AP")
    axis.plot(sizes, 100 * np.asarray(result["chance_ap"]), "k--", label="chance")
    axis.set_xscale("log", base=2)
    axis.set_xlabel("attacker training updates per user")
    axis.set_ylabel("AP %")
    axis.legend()
    intro = (
        f"Seed 001 Figure 8: AP % (× chance) of the {view.cfg.attack.attackers[0]} attacker trained on n shadow updates "
        "per user (a seeded random subset across rounds), tested on every anonymous update."
    )
    write(out, "train_size", "Re-identification by attacker training examples (seed 001 Figure 8)", intro,
          table(["updates per user", "AP % (× chance)", "top-1 %"], rows), result, fig)  # fmt: skip
    return result
