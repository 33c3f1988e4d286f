"""How the attack side's cores are spent (``server.cores``): shadow lanes of one torch thread each, never more at once
than the cores the federation's evaluation leaves the attack side."""

from __future__ import annotations

import pytest
import torch

from leakbed.core.config import ConfigError
from leakbed.server import cores, run_parts
from tests.conftest import tiny_config


@pytest.mark.parametrize("cpus", [1, 2, 3, 4, 8, 16, 64])
@pytest.mark.parametrize("count", [1, 2, 3, 8])
def test_the_shadow_lanes_never_hold_more_cores_than_are_left_them(monkeypatch, cpus, count):
    """Auto: one lane per attack task at once, at most the CPUs. With the evaluation's threads (the cores the lanes
    leave), the shadow lanes at work (one torch thread each, at most ``count`` at once) never ask for more cores than
    the host has, once it has more than the lanes may take."""
    monkeypatch.setattr(cores.os, "sched_getaffinity", lambda _: set(range(cpus)), raising=False)
    monkeypatch.setattr(torch, "get_num_threads", lambda: cpus)
    cfg = tiny_config(f"workers.count={count}")
    lanes = cores.shadow_lanes(cfg)
    assert lanes == min(count, cpus) and 1 <= lanes <= cpus
    at_once = min(lanes, count)  # the pool runs at most workers.count lane tasks at once
    threads = run_parts.evaluation_threads(cfg, torch.device("cpu"))
    if cpus > count:
        assert at_once * 1 + threads <= cpus
    assert cores.shadow_lanes(cfg, cpus=cpus) == lanes  # the memory estimate's CPUs give the same count


def test_an_explicit_count_and_remote_workers(monkeypatch):
    monkeypatch.setattr(cores.os, "sched_getaffinity", lambda _: {0, 1}, raising=False)
    assert cores.shadow_lanes(tiny_config("workers.shadow_lanes=5", "workers.count=2")) == 5
    remote = tiny_config("workers.count=4", "workers.addresses=['unix:/tmp/w.sock']")
    assert cores.shadow_lanes(remote) == 4  # lanes on the workers' hosts: their cores are not this host's
    assert cores.shadow_lanes(tiny_config("workers.count=1")) == 1


@pytest.mark.parametrize("bad", ["-1", "65", "1.5"])
def test_a_shadow_lane_count_out_of_bounds_is_refused(bad):
    with pytest.raises(ConfigError, match="shadow_lanes"):
        tiny_config(f"workers.shadow_lanes={bad}")


def test_a_runs_progress_gets_the_attack_sides_figures_beside_its_last_round():
    """``RunParts.attack_progress`` (the pool's ``on_progress``) hands the figures to the run's progress as
    ``attack_<figure>`` values, with the last round the federation finished (0 before any)."""
    calls: list = []
    parts = run_parts.RunParts.__new__(run_parts.RunParts)  # only its progress and utility are read
    parts.progress, parts.utility = lambda rnd, values: calls.append((rnd, values)), {}
    figures = {"rounds": 3, "analysed": 1, "lag": 2, "fits": 0, "fitted": 0, "fitting": 0}
    parts.attack_progress(figures)
    parts.utility = {0: {}, 1: {}, 2: {}}
    parts.attack_progress(figures)
    values = {f"attack_{k}": float(v) for k, v in figures.items()}
    assert calls == [(0, values), (2, values)]


@pytest.mark.parametrize(("model", "batch_users", "shares"), [("cnn", 64, False), ("cnn", 0, True), ("lstm-lm", 64, True)])
def test_rounds_are_shared_only_where_a_share_gives_a_lone_lanes_bits(model, batch_users, shares):
    """The one-user loop, or the batched path without convolutions, share every round; a batched CNN's rounds go whole
    to one lane (a convolution over fewer users may run another kernel: other last bits)."""
    from leakbed.core.data.corpus import Corpus
    from leakbed.core.models import build_model

    cfg = tiny_config(f"model.name='{model}'", f"attack.shadow_batch_users={batch_users}")
    shape = (3, 8, 8) if model == "cnn" else (9,)
    corpus = Corpus("tiny", "multiclass" if model == "cnn" else "next-token", 4 if model == "cnn" else 30, shape, {},
                    None if model == "cnn" else tuple(f"w{i}" for i in range(30)))  # type: ignore[arg-type]
    parts = run_parts.RunParts.__new__(run_parts.RunParts)  # only its config and model are read
    parts.cfg, parts.model = cfg, build_model(cfg.model, corpus)
    assert parts.shadow_shares() is shares
