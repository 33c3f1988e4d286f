"""The FedSGD setting, the property plan and the batch facts a device seals (client side of the
property attacks; kept beside their tests)."""

import numpy as np
import torch

from leakbed.client.batch_truth import batch_truth
from leakbed.core.config import build_config
from leakbed.core.data.corpus import UserData
from leakbed.core.property_plan import planned_data, property_holders
from leakbed.core.training import TrainConfig, batch_indices


def _data(n=20):
    prop = np.arange(n) % 4 == 0
    return UserData(np.arange(n, dtype=np.float32).reshape(n, 1), np.zeros(n, np.int64), np.zeros(n), {"property": prop})


def test_local_steps_cut_or_extend_the_epochs():
    assert [len(b) for b in batch_indices(20, TrainConfig(1, 8, 0.1, "sgd", 0.0, 0), 1)] == [8, 8, 4]
    assert [len(b) for b in batch_indices(20, TrainConfig(1, 8, 0.1, "sgd", 0.0, 1), 1)] == [8]
    five = batch_indices(20, TrainConfig(1, 8, 0.1, "sgd", 0.0, 5), 1)  # more batches than one epoch holds
    assert len(five) == 5 and torch.equal(five[0], batch_indices(20, TrainConfig(1, 8, 0.1, "sgd", 0.0, 0), 1)[0])


def test_plan_holders_and_onset():
    users = [f"u{i}" for i in range(10)]
    cfg = build_config({}, ["data.property_plan.holder_fraction=0.3"])
    plan = cfg.data.property_plan
    holders = property_holders(plan, cfg.seed, users)
    assert len(holders) == 3 and holders == property_holders(plan, cfg.seed, users)
    outsider = next(u for u in users if u not in holders)
    assert not planned_data(plan, cfg.seed, users, outsider, _data(), 1).attrs["property"].any()
    assert len(planned_data(plan, cfg.seed, users, next(iter(holders)), _data(), 1)) == 20
    timed = build_config({}, ['data.property_plan.holders=["u1"]', "data.property_plan.onset_round=3"]).data.property_plan
    assert not planned_data(timed, 0, users, "u1", _data(), 2).attrs["property"].any()
    assert planned_data(timed, 0, users, "u1", _data(), 3).attrs["property"].all()


def test_batch_truth_reports_the_used_examples():
    data = _data()
    one = TrainConfig(1, 8, 0.1, "sgd", 0.0, 1)
    facts = batch_truth(data, one, 7, records=True)
    used = batch_indices(20, one, 7)[0].numpy()
    assert facts["batch-examples"] == 8 and len(facts["batch-records"]) == 8
    assert facts["property-fraction"] == data.attrs["property"][used].mean()
    assert facts["has-property"] == int(data.attrs["property"][used].any())
    assert "batch-records" not in batch_truth(data, one, 7, records=False)
