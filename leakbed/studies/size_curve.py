"""Re-identification AP as a function of a size (seed 001 §6.2.1, Figures 7 and 8): the attacker is
re-trained at each size (in the sandbox, ``studies.reattack``) and tested on the run's anonymous updates; one
curve, one table."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from leakbed.studies.plots import pct, plt
from leakbed.studies.run_view import RunView

TrainingSet = Callable[[int], tuple[np.ndarray, np.ndarray]]


def reid_by_size(view: RunView, study: str, sizes: list[int], training_set: TrainingSet) -> tuple[dict, list[list[str]]]:
    """For each size, the run's first attacker fitted on ``training_set(size)``; the scores and the table rows."""
    ax, owners, _ = view.anon()
    result: dict = {"sizes": sizes, "ap": [], "chance_ap": [], "x_chance": []}
    rows = []
    attack = view.reattack(study)
    for size in sizes:
        x, y = training_set(size)
        attack.add(f"size{size}", x, y, ax, owners)
    fitted = attack.run()
    for size in sizes:
        m = fitted[f"size{size}"].metrics()
        for key in ("ap", "chance_ap", "x_chance"):
            result[key].append(m[key])
        rows.append([str(size), pct(m["ap"], m["chance_ap"]), f"{100 * m['top1']:.1f}"])
    return result, rows


def size_figure(result: dict, xlabel: str) -> plt.Figure:
    """AP % against the size (log₂ axis), with the chance level."""
    fig, axis = plt.subplots(figsize=(5, 3.5))
    axis.plot(result["sizes"], 100 * np.asarray(result["ap"]), "o-", label="AP")
    axis.plot(result["sizes"], 100 * np.asarray(result["chance_ap"]), "k--", label="chance")
    axis.set_xscale("log", base=2)
    axis.set_xlabel(xlabel)
    axis.set_ylabel("AP %")
    axis.legend()
    return fig
