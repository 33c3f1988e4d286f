"""The privacy audit through the real mechanism (``leakbed.reference.audit_harness``): Flower's DP wrapper around
FedAvg, every reply through the defenses' own device Mods, the referee's canaries far above the clipping norm, a noise
secret.

At a size a test affords (d = 20,200, 20 devices and about 64 inserted canaries a round, 10 rounds, DP-FedAvg at clip
0.5 and z = 1: accountant ε 19.05, exact 17.86), with the answer known: the honest mechanism's interval holds the exact
ε and is not flagged; a defense plugin from outside the project (plugins/leakbed-broken-dp) that states the same
mechanism but adds 0.5x or 0.1x of its noise, or clips at 10x its norm, is flagged; the canaries' clipping is what the
devices' Mod does; DP noise is drawn from the noise secret, not from the config.
"""

from __future__ import annotations

import fcntl
import math
import subprocess
import sys
import zlib
from importlib.metadata import PackageNotFoundError, version

import numpy as np
import pytest
from flwr.supercore.task_identity import TaskIdentity

import leakbed.defenses.dp
from leakbed.core.audit import VIEWS
from leakbed.core.audit_epsilon import gdp_epsilon
from leakbed.core.secret_noise import global_noise
from leakbed.referee.noise import noise_secret
from leakbed.reference.audit_harness import audited_run, config
from tests.conftest import REPO

HONEST = 'dp-fedavg", clip=0.5, noise_multiplier=1.0'
BROKEN = "plugins/leakbed-broken-dp"


@pytest.fixture(autouse=True)
def _run_identity(monkeypatch):
    """The task identity a SuperLink would set (Flower's DP wrapper reads it), for this test only."""
    for name, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, name, value)


@pytest.fixture(scope="module")
def broken_plugin():
    """The broken DP-FedAvg plugin (its own package, outside leakbed's) installed as a researcher installs theirs."""
    with open("/tmp/leakbed-broken-dp.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            version("leakbed-broken-dp")
        except PackageNotFoundError:
            cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", str(REPO / BROKEN)]
            subprocess.run(cmd, check=True, capture_output=True, text=True)
    from leakbed.defenses import registry

    registry.defense.cache_clear()


@pytest.mark.long
def test_the_honest_mechanism_is_within_its_claim_and_its_intervals_hold_the_exact_epsilon():
    out = audited_run(config(HONEST)).summary
    exact = out["epsilon_exact"]
    assert out["epsilon_accountant"] == pytest.approx(19.05, abs=0.05) and exact == pytest.approx(17.86, abs=0.05)
    assert exact == pytest.approx(gdp_epsilon(math.sqrt(10), 1e-5), rel=1e-3)  # 10 Gaussian releases at z = 1, exactly
    assert not out["flagged"] and "flag" not in out
    assert out["inserted"] in range(44, 85) and out["per_round"] == out["inserted"] and out["level"] == 0.9
    assert out["norm"] == pytest.approx(0.5 * 1e4)  # far above the clip: the device's clipper must act
    for view in ("final model", "all iterates"):
        est = out[view]
        lo, hi = est["interval"]
        assert lo < exact < hi and 0.7 * exact < est["epsilon_emp"] < 1.3 * exact, (view, est)
        assert est["inserted"] == out["inserted"] and est["held_out"] == 128 - out["inserted"]
        assert est["epsilon_lower_bound"] <= est["lower_bound_ceiling"] < exact and not est["above_accountant"]
    final = out["final model"]  # the known null: a random direction's cosine in d dimensions has spread 1/sqrt(d)
    assert final["spread_null"] == pytest.approx(1 / math.sqrt(20_200)) and final["fit"] == "known null"
    assert final["spread_held_out"] == pytest.approx(final["spread_null"], rel=0.25)
    assert out["all iterates (max)"]["epsilon_emp"] < 0.7 * exact  # the max over rounds: less power when every round


@pytest.mark.long
@pytest.mark.parametrize(
    ("broken", "floor"),
    [("noise_scale=0.5", 35.0), ("noise_scale=0.1", 120.0), ("clip_scale=10.0", 120.0)],
    ids=["0.5x noise", "0.1x noise", "10x clip"],
)
def test_a_broken_mechanism_from_a_plugin_is_flagged(broken_plugin, broken, floor):
    """The plugin states DP-FedAvg at clip 0.5 and z = 1 (the accountant's ε is the honest one's) but delivers less."""
    out = audited_run(config(f'broken-dp-fedavg", {broken}')).summary
    assert out["defense"] == "broken-dp-fedavg" and out["epsilon_accountant"] == pytest.approx(19.05, abs=0.05)
    assert out["flagged"] and "leaks more than its DP claims" in out["flag"]
    for view in ("final model", "all iterates"):
        assert out[view]["above_accountant"] and out[view]["interval"][0] > floor, (view, out[view])
        assert out[view]["epsilon_lower_bound"] <= out[view]["lower_bound_ceiling"]  # the one-run bound cannot show it


@pytest.mark.long
def test_the_plugin_at_its_stated_parameters_is_not_flagged(broken_plugin):
    out = audited_run(config('broken-dp-fedavg"')).summary
    assert not out["flagged"]
    for view in ("final model", "all iterates"):
        assert 0.7 * out["epsilon_exact"] < out[view]["epsilon_emp"] < 1.3 * out["epsilon_exact"], out[view]


def test_a_missing_device_clipper_shows(monkeypatch):
    """dp-fedavg's device Mod passing replies through: canaries at 1e4 x the clip enter the average unclipped."""
    monkeypatch.setattr(leakbed.defenses.dp, "fixedclipping_mod", lambda msg, ctx, call_next: call_next(msg, ctx))
    out = audited_run(config(HONEST)).summary
    assert out["flagged"] and out["final model"]["interval"][0] > 100, out["final model"]


@pytest.mark.long
def test_canaries_at_the_clipping_norm_would_not_test_the_clipper(broken_plugin):
    """Made at the clip (audit.norm = 0.5), canaries are never touched by a clipper at 10x: the run passes. The
    default (1e4 x the clip) is what catches it (the parametrized test above)."""
    out = audited_run(config('broken-dp-fedavg", clip_scale=10.0', norm=0.5)).summary
    assert not out["flagged"], out["final model"]


def test_no_noise_and_huge_noise():
    none = audited_run(config('dp-fedavg", clip=0.5, noise_multiplier=0.0', canaries=64, rounds=3)).summary
    assert none["epsilon_accountant"] is None and not none["flagged"]  # no claim, nothing to flag
    assert none["final model"]["epsilon_emp"] > 100 and none["final model"]["epsilon_lower_bound"] > 1.5
    huge = audited_run(config('dp-fedavg", clip=0.5, noise_multiplier=1000.0', canaries=64, rounds=3)).summary
    for view in VIEWS:
        assert huge[view]["interval"][0] < 0.5 and huge[view]["epsilon_lower_bound"] < 0.3, huge[view]


def test_the_undefended_baseline_has_no_claim_and_canaries_at_norm_one():
    out = audited_run(config("", canaries=64, rounds=3)).summary
    assert out["epsilon_accountant"] is None and out["defense"] is None and out["norm"] == 1.0 and not out["flagged"]
    assert out["all iterates"]["epsilon_emp"] > 15


def test_the_privacy_row_reports_the_noise_flower_adds():
    run = audited_run(config(HONEST, canaries=64, rounds=2), keep=True)
    [row] = run.privacy
    averaged = 20 + run.summary["per_round"]
    assert row["averaged_per_round"] == averaged and row["sampled_per_round"] == 20
    noise = np.concatenate([(run.released[0][k] - run.averaged[0][k]).ravel() for k in run.released[0]])
    assert noise.std() == pytest.approx(row["noise_std_on_average"], rel=0.02) == 1.0 * 0.5 / averaged


def test_the_noise_is_not_regenerated_from_the_config(tmp_path):
    """Round 1's noise on the aggregate, against what the config alone regenerates: the former recipe (numpy seeded
    from the run seed and the round) and the config's seed taken as the secret; the referee's kept secret, handed
    back, regenerates it exactly."""
    cfg = config(HONEST, seed=0, canaries=64, rounds=1)
    secret = noise_secret(tmp_path / "referee")  # as a run's referee draws it: the OS's randomness, kept there
    run = audited_run(cfg, noise_secret=secret, keep=True)
    keys = list(run.released[0])
    noise = {k: run.released[0][k] - run.averaged[0][k] for k in keys}
    std = run.privacy[0]["noise_std_on_average"]

    def flower_noise() -> dict[str, np.ndarray]:  # what Flower's wrapper draws from NumPy's global generator
        return {k: np.random.normal(0, std, noise[k].shape).astype(np.float32) for k in keys}

    def residual(guess: dict[str, np.ndarray]) -> float:
        return float(np.sqrt(sum(((noise[k] - guess[k]) ** 2).sum() for k in keys) / sum((noise[k] ** 2).sum() for k in keys)))

    np.random.seed(zlib.crc32(f"{cfg.seed}/1/dp-fedavg".encode()))
    assert residual(flower_noise()) > 1.2  # independent noise: about sqrt(2)
    with global_noise(cfg.seed, "dp-fedavg", 1):
        assert residual(flower_noise()) > 1.2
    with global_noise(noise_secret(tmp_path / "referee"), "dp-fedavg", 1):  # the kept secret: read back, not redrawn
        assert residual(flower_noise()) < 1e-4


@pytest.mark.long
def test_the_same_seed_gives_the_same_canaries_and_the_secret_the_same_noise():
    cfg = config(HONEST, seed=3, canaries=64, rounds=3)
    a, b, c = audited_run(cfg, noise_secret=7), audited_run(cfg, noise_secret=7), audited_run(cfg, noise_secret=8)
    assert a.summary == b.summary
    assert c.summary["inserted"] == a.summary["inserted"]  # the canaries' secret follows the seed
    assert c.summary["final model"]["epsilon_emp"] != a.summary["final model"]["epsilon_emp"]  # the noise, the secret
    assert "directions" not in a.summary and "inserted_mask" not in a.summary  # numbers only, never the secret


def test_without_a_secret_every_draw_is_fresh():
    wrapper_draws = []
    for _ in range(2):
        with global_noise(None, "dp-fedavg", 1):
            wrapper_draws.append(np.random.normal(size=4))
    assert not np.array_equal(*wrapper_draws)
