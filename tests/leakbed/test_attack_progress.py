"""The attack side's progress on the console: the ServerApp writes the pool's figures beside the round
(``apps.write_progress``), the launcher follows the file (``simulate.follow``) and ``leakbed run`` shows a bar of its
own per prior (rounds analysed, how far behind, fits), not silence while the attacks catch up and fit."""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager

from leakbed import console
from leakbed.apps import progress_writer, write_progress
from leakbed.commands import experiment
from leakbed.run_state import PROGRESS_FILE
from leakbed.simulate import follow
from tests.conftest import tiny_config

FIGURES = {"rounds": 3.0, "analysed": 1.0, "lag": 2.0, "fits": 0.0, "fitted": 0.0, "fitting": 0.0}


def test_the_progress_file_carries_the_attack_sides_figures(tmp_path):
    write_progress(tmp_path, 3, 20, 0.5)
    assert json.loads((tmp_path / PROGRESS_FILE).read_text()) == {"round": 3, "rounds": 20, "utility": 0.5}
    write_progress(tmp_path, 3, 20, 0.5, FIGURES)
    assert json.loads((tmp_path / PROGRESS_FILE).read_text())["attack"] == FIGURES


def test_the_serverapp_writes_rounds_and_figures_together_once_a_round_is_known(tmp_path):
    """The pool's figures (from its threads) and the rounds (from the ServerApp's) share one file: figures that come
    before round 0 was evaluated wait for it; a round keeps the last figures and the figures the last round."""
    progress = progress_writer(tmp_path, 5)
    progress(0, {f"attack_{k}": v for k, v in FIGURES.items()})
    assert not (tmp_path / PROGRESS_FILE).exists()
    progress(0, {"utility": 0.1})
    assert json.loads((tmp_path / PROGRESS_FILE).read_text()) == {"round": 0, "rounds": 5, "utility": 0.1, "attack": FIGURES}
    progress(1, {"utility": 0.2, "loss": 3.0})
    progress(1, {"attack_lag": 0.0, "attack_analysed": 3.0})
    state = json.loads((tmp_path / PROGRESS_FILE).read_text())
    assert (state["round"], state["utility"]) == (1, 0.2) and state["attack"] == {**FIGURES, "lag": 0.0, "analysed": 3.0}
    threads = [threading.Thread(target=progress, args=(1, {"attack_lag": float(i)})) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert json.loads((tmp_path / PROGRESS_FILE).read_text())["round"] == 1  # never half-written, never interleaved
    assert not list(tmp_path.glob(".*.tmp"))


def test_the_launcher_follows_every_change_not_only_new_rounds(tmp_path):
    """Round 20 is the last: after it only the attack side's figures change, and each change reaches the display."""
    seen: list = []
    done = threading.Event()
    watcher = threading.Thread(target=follow, args=(done.is_set, tmp_path / PROGRESS_FILE, lambda r, v: seen.append((r, v))))
    watcher.start()
    try:
        write_progress(tmp_path, 20, 20, 0.9)
        _until(lambda: len(seen) == 1)
        for n, analysed in enumerate((18.0, 20.0), start=2):
            write_progress(tmp_path, 20, 20, 0.9, {**FIGURES, "rounds": 20.0, "analysed": analysed, "lag": 20 - analysed})
            _until(lambda n=n: len(seen) == n)
    finally:
        done.set()
        watcher.join(5)
    assert seen[0] == (20, {"utility": 0.9})
    assert [v["attack_analysed"] for _, v in seen[1:]] == [18.0, 20.0] and all(r == 20 for r, _ in seen)
    assert seen[-1][1]["attack_lag"] == 0.0 and seen[-1][1]["utility"] == 0.9


def test_the_attack_sides_words():
    side = "random prior: attacks"
    assert console.attack_progress(side, {"attack_lag": 1.0}) == f"{side} (lag 1)"
    assert console.attack_progress(side, {"attack_lag": 12.0, "attack_fits": 0.0}) == f"{side} (lag 12)"
    fits = {"attack_lag": 0.0, "attack_fits": 3.0, "attack_fitted": 1.0, "attack_fitting": 2.0}
    assert console.attack_progress(side, fits) == f"{side} (lag 0; fits 1/3, 2 running)"
    assert console.attack_progress(side, {**fits, "attack_fitted": 3.0, "attack_fitting": 0.0}) == f"{side} (lag 0; fits 3/3)"
    assert len(console.attack_progress(side, fits)) <= 55  # beside its bar, as long as the FL rounds' words, on 80 columns


def test_leakbed_run_shows_a_bar_for_the_attack_side(tmp_path, monkeypatch):
    """``run_experiment``'s progress adds the prior's attack-side bar with its first figures and moves it with the
    rounds analysed; the FL bar still follows the rounds."""
    import leakbed.report
    import leakbed.simulate

    bar = Bar()

    def simulate(cfg, rule, run_dir, progress, link):  # noqa: ANN001, ANN202
        progress(0, {"utility": 0.1})
        progress(2, {"utility": 0.4})
        progress(2, {"utility": 0.4, **{f"attack_{k}": v for k, v in FIGURES.items()}})
        progress(2, {"utility": 0.4, **{f"attack_{k}": v for k, v in {**FIGURES, "analysed": 2.0, "lag": 0.0}.items()}})

    @contextmanager
    def link(cfg, logs):  # noqa: ANN001, ANN202
        yield None

    monkeypatch.setattr(leakbed.simulate, "simulate", simulate)
    monkeypatch.setattr(leakbed.simulate, "simulation_link", link)
    monkeypatch.setattr(leakbed.report, "write_report", lambda run_dir: run_dir / "report.md")
    experiment.run_experiment(tiny_config("fl.rounds=2", "split.priors=['random']"), tmp_path / "run", bar)
    assert [t["description"] for t in bar.tasks] == ["random prior: FL rounds (utility 0.400)", "random prior: attacks (lag 0)"]
    assert bar.tasks[1]["completed"] == 2.0 and bar.tasks[1]["total"] == 2 and bar.tasks[0]["completed"] == 2
    assert ("random prior: attacks (lag 2)", 1.0) in bar.history


class Bar:
    """A stand-in for rich's Progress: its tasks and every description an update gave."""

    def __init__(self) -> None:
        self.tasks: list[dict] = []
        self.history: list[tuple[str, float]] = []

    def add_task(self, description: str, total: int) -> int:
        self.tasks.append({"description": description, "total": total, "completed": 0})
        return len(self.tasks) - 1

    def update(self, task: int, completed: float, description: str) -> None:
        self.tasks[task].update(completed=completed, description=description)
        self.history.append((description, completed))


def _until(condition, timeout: float = 10.0) -> None:  # noqa: ANN001
    until = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < until, "timed out"
        time.sleep(0.05)

