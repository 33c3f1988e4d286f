"""Re-identification by training progress (seed 001 §6.2.3, Figure 10): the MLP trained on shadow
updates from one range of rounds and evaluated on anonymous updates from another, for every pair
of (up to) 10 equal round ranges. Reads the run's store only; the attacker is re-fitted in the sandbox."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from leakbed.core.errors import LeakbedError
from leakbed.core.tables import markdown_table
from leakbed.studies.plots import plt, write
from leakbed.studies.run_view import RunView


def run(view: RunView, out: Path, ranges: int = 10) -> dict:
    sx, sy, sr = view.store.read_shadow()
    ax, owners, ar = view.anon()
    rounds = sorted(set(sr.tolist()) & set(ar.tolist()))
    if len(rounds) < 2:
        raise LeakbedError(f"{view.prior_dir}: needs shadow and anonymous updates from at least 2 rounds")
    groups = [g.tolist() for g in np.array_split(np.asarray(rounds), min(ranges, len(rounds)))]
    ap = np.full((len(groups), len(groups)), np.nan)
    chance = np.full_like(ap, np.nan)
    attack = view.reattack("progress")
    for i, gi in enumerate(groups):
        tr = np.isin(sr, gi)
        attack.add(f"train{i}", sx[tr], sy[tr], ax, owners, ar)
    fitted = attack.run()
    for i in range(len(groups)):
        pred = fitted[f"train{i}"]
        for j, gj in enumerate(groups):
            m = pred.metrics(np.isin(pred.rounds, gj))
            ap[i, j], chance[i, j] = m["ap"], m["chance_ap"]
    labels = [f"{g[0]}-{g[-1]}" for g in groups]
    result = {"ranges": labels, "ap": ap.tolist(), "chance_ap": chance.tolist(), "attacker": view.attacker}
    fig, axis = plt.subplots(figsize=(6, 5))
    im = axis.imshow(100 * ap, cmap="viridis", origin="lower")
    axis.set_xticks(range(len(labels)), labels, rotation=45)
    axis.set_yticks(range(len(labels)), labels)
    axis.set_xlabel("test rounds (anonymous updates)")
    axis.set_ylabel("train rounds (shadow updates)")
    fig.colorbar(im, label="AP %")
    rows = [[labels[i], *[f"{100 * ap[i, j]:.1f}" for j in range(len(labels))]] for i in range(len(labels))]
    md = markdown_table(["train \\ test", *labels], rows)
    intro = (
        f"Seed 001 Figure 10: AP % of the {result['attacker']} attacker trained on shadow updates of one round range "
        f"(rows) and tested on anonymous updates of another (columns); mean chance AP {100 * np.nanmean(chance):.1f}%. "
        f"Diagonal mean {100 * np.nanmean(np.diag(ap)):.1f}%, off-diagonal mean "
        f"{100 * np.nanmean(ap[~np.eye(len(labels), dtype=bool)]):.1f}%."
    )
    write(out, "progress", "Re-identification by training progress (seed 001 Figure 10)", intro, md, result, fig)
    return result
