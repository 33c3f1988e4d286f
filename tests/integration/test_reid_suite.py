"""The re-identification suite end to end in one real run (Ray simulation, attack worker pool,
shuffler, referee): open world, matching, cross-modal (MiniLM text prior), profile prior and
attribute inference all run side by side on biased synthetic users and land well above chance;
their outputs reach metrics.json and the report. The IID / shuffled-owner controls that must fall
to chance are the unit tests in tests/attacks/test_{open_world,matching,...}.py."""

import pytest

from leakbed.report import write_report
from leakbed.simulate import simulate
from tests.conftest import tiny_config

FURTHER = ["open-world", "matching", "cross-modal", "profile", "attributes"]  # metrics.json "suite"
SUITE = ["mlp", "svm", "knn", *FURTHER]  # the closed-world attackers go to metrics.json "attackers"
SIAMESE_TABLES = ("matching", "open-world.siamese", "cross-modal.siamese")  # the three attacks' Siamese networks
SMALL = [
    "data.synthetic.users=30",
    "data.synthetic.examples_per_user=100",
    "data.synthetic.image_size=16",
    "fl.rounds=8",
    "fl.fraction_train=0.3",
    "fl.lr=0.1",
    "workers.count=2",
    f"attack.suite={SUITE}",  # the closed-world MLP: tiny_config's quicker one (this module reads no score of it)
    *[f"attack.params.{t}.{k}" for t in SIAMESE_TABLES for k in ("epochs=20", "eval_pairs=4000")],
    "attack.params.profile.top_k=5",
    "attack.params.attributes.epochs=60",
]


pytestmark = pytest.mark.slow  # a Ray simulation


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("reid-suite")
    summary = simulate(tiny_config(*SMALL), "random", out)
    return out, summary


def test_every_suite_attack_ran_and_was_scored(run):
    out, summary = run
    assert not summary["attackers_failed"] and not summary["pool"]["errors"]
    assert sorted(summary["suite"]) == sorted(FURTHER) and sorted(summary["attackers"]) == ["knn", "mlp", "svm"]
    report = write_report(out).read_text()
    assert "#### cross-modal (random prior)" in report and "seed 001 Table 4 form" in report
    assert (out / "random" / "profile_top_users.png").is_file()


def test_suite_attacks_well_above_chance_on_biased_users(run):
    s = run[1]["suite"]
    ow, mat, cm, prof, attr = (s[n] for n in FURTHER)
    assert ow["x_chance"] > 2.5 and ow["match_ap"] > 0.75, ow
    assert mat["ap"] > 0.8 and mat["prior_ap"] > 0.75 and mat["chance"] == 0.5, mat
    assert cm["encoder"] == "minilm" and cm["ap"] > 0.65 and cm["text_only_ap"] > 0.6, cm
    assert prof["ap"] > 1.5 * prof["chance_ap"] and prof["precision_at_k"] > prof["chance"], prof
    assert attr["stl_attr"] > attr["attr_chance"] + 0.1 and attr["stl_deanon"] > 5 * attr["deanon_chance"], attr
    assert attr["mtl_deanon"] > 5 * attr["deanon_chance"], attr
