"""Fidelity at a small, fast scale (seed 001 §6.1.1): biased users are re-identified far above
chance; the IID control (bias 0) stays at chance; the same seed gives the same numbers."""

import json

import numpy as np
import pytest

from leakbed.core.derive import derived_seed
from leakbed.core.layout import RunLayout
from leakbed.core.store import UpdateStore
from leakbed.simulate import SimulationLink, simulate
from tests.conftest import tiny_config
from tests.integration.shared_runs import BIASED, SMALL, biased_random

pytestmark = pytest.mark.slow

IID = [*SMALL, "data.synthetic.bias=0"]  # the IID control: the same users' sizes without their bias


@pytest.fixture(scope="module")
def iid(tmp_path_factory):
    """The IID control with every attacker: test_iid_control_stays_at_chance's run and test_same_seed_same_numbers's
    first one."""
    out = tmp_path_factory.mktemp("iid")
    return out, simulate(tiny_config(*IID), "random", out)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, iid):
    """The biased federation's random prior is test_defenses.py's undefended run too (``shared_runs``); its chrono
    prior's assertions read the MLP attacker only, so that prior runs that one."""
    out = tmp_path_factory.mktemp("fidelity")
    return {
        "biased-random": biased_random(tmp_path_factory),
        "biased-chrono": simulate(tiny_config(*BIASED, 'attack.suite=["mlp"]'), "chrono", out / "biased"),
        "iid-random": iid[1],
    }


def test_biased_users_are_reidentified_far_above_chance(runs):
    random_, chrono = runs["biased-random"]["attackers"], runs["biased-chrono"]["attackers"]
    assert random_["mlp"]["x_chance"] >= 5, random_["mlp"]
    assert chrono["mlp"]["x_chance"] >= 3, chrono["mlp"]
    for name in ("svm", "knn"):
        assert random_[name]["x_chance"] >= 3, (name, random_[name])
    assert random_["mlp"]["top1"] > 3 / 24


def test_iid_control_stays_at_chance(runs):
    for name, m in runs["iid-random"]["attackers"].items():
        assert m["x_chance"] <= 2.0, (name, m)


def test_every_tapped_update_is_analysed_and_scored(runs):
    for run in runs.values():
        pool = run["pool"]
        sampled = sum(r["sampled"] for r in run["rounds_log"].values())
        assert pool["tapped"] == pool["analysed"] == sampled == 8 * 6
        assert pool["dropped"] == pool["failed"] == 0 and not pool["errors"]
        assert run["attackers"]["mlp"]["n_updates"] == sampled


def _rows(anon: dict) -> list[tuple[int, bytes]]:
    """The anonymous updates as a multiset: (round, vector bytes), in a canonical order."""
    return sorted((int(r), np.ascontiguousarray(v).tobytes()) for r, v in zip(anon["round"], anon["vectors"], strict=True))


def test_same_seed_same_numbers(iid, tmp_path):
    """The same seed gives the same metrics and the same updates; the update ids are opaque
    (a random per-run key, not the seed), so they differ between the two runs and no seeded
    generator the attack side could hold regenerates them. Nor do the numbers depend on how many
    ClientApp actors Flower's pool holds: the first run (the module's IID control) has one on the tests' one-CPU
    Ray head, the second two on a private Ray of this machine's two cores (its own SuperLink)."""
    cfg = tiny_config(*IID)
    a_dir, a = iid
    with SimulationLink(tmp_path / "private-logs") as private:
        b = simulate(cfg, "random", tmp_path / "b", link=private)
    assert json.dumps(a["attackers"], sort_keys=True) == json.dumps(b["attackers"], sort_keys=True)
    assert a["utility"] == b["utility"]
    va = UpdateStore(RunLayout(a_dir).store("random")).read_anon()
    vb = UpdateStore(RunLayout(tmp_path / "b").store("random")).read_anon()
    assert len(va["ids"]) == len(vb["ids"]) > 0 and _rows(va) == _rows(vb)
    ids_a, ids_b = set(map(str, va["ids"])), set(map(str, vb["ids"]))
    assert len(ids_a) == len(ids_b) == len(va["ids"]) and not ids_a & ids_b
    for seed in (cfg.seed, derived_seed(cfg.seed, "attacker"), derived_seed(cfg.seed, "sampling")):
        rng = np.random.default_rng([seed, 0x5A])  # how the shuffler used to draw them
        assert not {rng.bytes(8).hex() for _ in range(4 * len(ids_a))} & (ids_a | ids_b)
    c = simulate(tiny_config(*IID, "seed=1"), "random", tmp_path / "c")
    assert c["utility"] != a["utility"]
