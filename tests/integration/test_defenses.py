"""Defenses against re-identification on biased synthetic users (seed 001 §7, Figure 12 in kind):
blending into the crowd protects at little utility cost; perturbation destroys utility first;
a defense at strength 0 changes nothing."""

import json

import pytest

from leakbed.simulate import simulate
from tests.conftest import tiny_config
from tests.integration.test_fidelity import SMALL

pytestmark = pytest.mark.slow


def _run(tmp, name, *defense):
    return simulate(tiny_config(*SMALL, *defense), "random", tmp / name)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("defenses")
    return {
        "none": _run(tmp, "none"),
        "mm-aug": _run(tmp, "mm-aug", 'defenses=[{name="mm-aug", strength=2.0}]'),
        "noise": _run(tmp, "noise", 'defenses=[{name="noise", strength=100.0}]'),
        "off": _run(tmp, "off", 'defenses=[{name="rand-aug", strength=0.0}, {name="noise", strength=0.0}]'),
        "half": _run(tmp, "half", 'defenses=[{name="mm-aug", strength=2.0, fraction=0.5}]'),
    }


def _util(run):
    return run["utility"][str(run["rounds"])]["utility"]


def test_mm_aug_halves_reidentification_and_keeps_utility(runs):
    none, mm = runs["none"], runs["mm-aug"]
    assert none["attackers"]["mlp"]["x_chance"] >= 5
    for name in ("mlp", "svm", "knn"):
        assert mm["attackers"][name]["x_chance"] <= 0.5 * none["attackers"][name]["x_chance"], name
    assert _util(mm) / _util(none) >= 0.9


def test_large_noise_destroys_utility(runs):
    assert _util(runs["noise"]) / _util(runs["none"]) <= 0.7
    assert _util(runs["noise"]) <= 0.15  # about 1/10: a random model


def test_defenses_off_reproduce_the_undefended_numbers(runs):
    assert json.dumps(runs["off"]["attackers"]["mlp"]["per_round"], sort_keys=True) == json.dumps(
        runs["none"]["attackers"]["mlp"]["per_round"], sort_keys=True
    )
    assert runs["off"]["utility"] == runs["none"]["utility"]


def test_report_separates_defending_users(runs):
    half = runs["half"]
    assert half["defending_users"] == 12
    for name in ("mlp", "svm"):
        groups = half["attackers"][name]["groups"]
        assert groups["defending"]["x_chance"] < groups["not defending"]["x_chance"], name
