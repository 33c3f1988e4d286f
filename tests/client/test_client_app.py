import json

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, RecordDict

from leakbed.client.app import TRUTH_KEY, app, train
from leakbed.client.plan import decode, handling
from leakbed.core.data import federation
from leakbed.core.models import build_model
from leakbed.core.plan import PLAN_KEY, DevicePlan
from leakbed.core.training import TrainConfig
from leakbed.server.plan import device_plan
from leakbed.server.run_parts import train_config
from tests.conftest import fake_message, tiny_config


def _train_message(cfg, model, rnd=1, rule="random"):
    conf = train_config(cfg, device_plan(cfg, rule, federation(cfg, rule).user_ids))
    conf["server-round"] = rnd
    return fake_message(RecordDict({"arrays": ArrayRecord(model.state_dict()), "config": conf}), src=0, dst=5)


def _context(pid):
    return Context(run_id=1, node_id=5, node_config={"partition-id": pid, "num-partitions": 6}, state=RecordDict(), run_config={})


def handler(msg, context):
    """The train handler alone (no defense Mod), inside the message's plan as the ClientApp's first Mod sets it."""
    with handling(decode(msg, context)):
        return train(msg, context)


def test_device_trains_on_its_own_data_and_labels_its_truth_separately():
    cfg = tiny_config()
    fed = federation(cfg, "random")
    torch.manual_seed(0)
    model = build_model(cfg.model, fed.corpus)
    reply = handler(_train_message(cfg, model), _context(2))
    content = reply.content
    assert set(content.array_records) == {"arrays"} and set(content.metric_records) == {"metrics"}
    assert content.metric_records["metrics"]["num-examples"] == len(fed.private(2))
    assert content.config_records[TRUTH_KEY]["user-id"] == fed.user_ids[2]
    new = content.array_records["arrays"].to_torch_state_dict()
    assert any(not torch.equal(new[k], v) for k, v in model.state_dict().items()), "weights changed"
    again = handler(_train_message(cfg, model), _context(2)).content.array_records["arrays"].to_torch_state_dict()
    assert all(np.array_equal(new[k].numpy(), again[k].numpy()) for k in new), "same seed, same update"


def test_unknown_partition_is_an_error():
    cfg = tiny_config()
    torch.manual_seed(0)
    model = build_model(cfg.model, federation(cfg, "random").corpus)
    with pytest.raises(ValueError, match="partition-id 9"):
        handler(_train_message(cfg, model), _context(9))


def test_the_round_config_carries_the_training_keys_and_the_device_plan_only():
    """A device gets its train config, its defenses with their params and adopters, the truth it must seal: no
    experiment, no attack, no telemetry."""
    from leakbed.core.declaration import needs_of
    from leakbed.preflight import declarations

    cfg = tiny_config('defenses=[{name="noise", variance=0.1, users=["user1"]}]', "attack.suite=['knn', 'membership']")
    records = needs_of(declarations(cfg), cfg.attack.suite, "records")  # membership scores per sample: it declares so
    assert not device_plan(cfg, "chrono", federation(cfg, "chrono").user_ids).records  # none declared: no records
    conf = train_config(cfg, device_plan(cfg, "chrono", federation(cfg, "chrono").user_ids, records))
    assert isinstance(conf, ConfigRecord) and set(conf) == {*TrainConfig.KEYS, PLAN_KEY}
    assert TrainConfig.from_config(conf) == TrainConfig.of(cfg.fl)
    plan = json.loads(str(conf[PLAN_KEY]))
    assert set(plan) == set(DevicePlan.model_fields) and plan["rule"] == "chrono" and plan["records"] is True
    assert plan["defenses"] == [{"index": 0, "name": "noise", "params": {"variance": 0.1}, "adopters": ["user1"]}]
    assert "attack" not in plan and "telemetry" not in plan and "knn" not in str(conf[PLAN_KEY])


def test_a_device_validates_its_plan_once_per_message(monkeypatch):
    """Every Mod and the handler read the plan decoded by the ClientApp's first Mod: one validation per round,
    however many defenses the device applies."""
    cfg = tiny_config(
        'defenses=[{name="noise", variance=0.01}, {name="selective", share=0.5}, {name="count-bucket"}, {name="dropout", p=0.1}]'
    )
    torch.manual_seed(0)
    model = build_model(cfg.model, federation(cfg, "random").corpus)
    msg = _train_message(cfg, model)
    calls = []
    original = DevicePlan.model_validate_json.__func__

    def counted(cls, *args, **kwargs):
        calls.append(1)
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(DevicePlan, "model_validate_json", classmethod(counted))
    reply = app(msg, _context(1))
    assert not reply.has_error(), reply.error
    assert len(calls) == 1
