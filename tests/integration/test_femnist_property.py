"""Passive batch property inference (seed 002 §7.1.4) on real FEMNIST writers: the property is a
bold stroke measured from the pixels (leakbed/core/data/handwriting.py), independent of the character,
so the attacker must read it from the update, not from the labels."""

import json

import pytest

from leakbed.core.config import load_config
from leakbed.core.layout import RunLayout
from leakbed.simulate import simulate
from tests.conftest import REPO, SHARED_DATA

pytestmark = [pytest.mark.slow, pytest.mark.shared_data("femnist")]


def test_bold_batches_are_told_from_updates(tmp_path):
    cfg = load_config(
        REPO / "leakbed/configs/femnist-property.toml",
        [
            f"data.path='{SHARED_DATA / 'femnist'}'",
            "data.max_users=24",
            "fl.rounds=8",
            "workers.count=1",
            'attack.suite=["property"]',
        ],
    )
    run = simulate(cfg, "random", tmp_path)
    prop = run["suite"]["property"]
    truth = [json.loads(line) for line in (RunLayout(tmp_path).referee("random") / "truth.jsonl").read_text().splitlines()]
    # Measured (seed 0, 8 rounds of 12 devices, the property attack alone: nothing here reads another attack): 90
    # updates, positive share 0.49, AUC 0.87, AUC on majority-bold batches 0.95, 11 holders, dataset AUC 0.92.
    # a non-holder whose private images are all bold has nothing left to train on and sends nothing
    assert prop["updates"] == len(truth) > 0.9 * 8 * 12
    assert 0.25 < prop["positive_share"] < 0.75  # both kinds of batches occur: holders and non-holders
    assert prop["auc"] > 0.68, prop  # 0.5 = chance; the full config measures 0.78
    assert prop["auc_majority"] > 0.85, prop  # batches mostly bold against bold-free ones
    # 12 writers are holders; one holding almost no bold images may fall under attack.property.holder_rate
    assert 10 <= prop["dataset_holders"] <= 12 and prop["dataset_auc"] > 0.6, prop
