"""Passive property inference end to end (seed 002 §7.1.4, §7.2.4) in the FedSGD setting: three
users' devices start training on marked images at round 2 (Figure 7.5's "when the property
appears"); the referee scores single-batch AUC, whole-dataset inference and the timeline."""

import json

import numpy as np
import pytest

from leakbed.core.data import federation
from leakbed.core.layout import RunLayout
from leakbed.simulate import simulate
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow  # a Ray simulation


def test_property_appears_at_onset_and_is_inferred(tmp_path):
    data = ("data.synthetic.examples_per_user=80", "data.synthetic.property_rate=0.5")
    base = tiny_config(*data)
    fed = federation(base, "random")
    marked = {u: int(fed.private(i).attrs["property"].sum()) for i, u in enumerate(fed.user_ids)}
    holders = sorted(u for u, n in marked.items() if 4 <= n <= len(fed.private(fed.user_ids.index(u))) - 4)[:3]
    assert len(holders) == 3  # users with marked and unmarked images to train on
    cfg = tiny_config(
        *data,
        "fl.rounds=3",
        "fl.fraction_train=1.0",
        "fl.local_steps=1",
        "fl.batch_size=8",
        f"data.property_plan.holders={holders}",
        "data.property_plan.onset_round=2",
        'attack.suite=["property"]',  # the one attack read here: one sandboxed lane
        'split.priors=["random"]',
    )
    run = simulate(cfg, "random", tmp_path)
    layout = RunLayout(tmp_path)
    truth = [json.loads(line) for line in (layout.referee("random") / "truth.jsonl").read_text().splitlines()]
    assert len(truth) == 18 and all(0 < t["batch-examples"] <= 8 for t in truth)
    for t in truth:  # the plan as the devices report it: only holders, only from the onset, only marked images
        held = t["user_id"] in holders and t["round"] >= 2
        assert t["has-property"] == int(held) and t["property-fraction"] == float(held)
    prop = run["suite"]["property"]
    assert prop["updates"] == 18 and prop["positive_share"] == 6 / 18
    assert prop["auc"] > 0.75  # pure property batches against property-free ones
    assert prop["dataset_holders"] == 3 and prop["dataset_auc"] is not None
    assert (layout.results("random") / "property_timeline.png").stat().st_size > 0
    assert prop["figures"] == ["property_timeline.png"]
    assert np.isfinite(prop["auc_majority"])
