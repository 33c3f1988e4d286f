import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, RecordDict

from client.app import TRUTH_KEY, train
from core.data import federation
from core.models import build_model
from server.run_parts import train_config
from tests.conftest import fake_message, tiny_config


def _train_message(cfg, model, rnd=1):
    conf = train_config(cfg, "random")
    conf["server-round"] = rnd
    return fake_message(RecordDict({"arrays": ArrayRecord(model.state_dict()), "config": conf}), src=0, dst=5)


def _context(pid):
    return Context(run_id=1, node_id=5, node_config={"partition-id": pid, "num-partitions": 6}, state=RecordDict(), run_config={})


def test_device_trains_on_its_own_data_and_labels_its_truth_separately():
    cfg = tiny_config()
    fed = federation(cfg, "random")
    torch.manual_seed(0)
    model = build_model(cfg.model, fed.corpus)
    reply = train(_train_message(cfg, model), _context(2))
    content = reply.content
    assert set(content.array_records) == {"arrays"} and set(content.metric_records) == {"metrics"}
    assert content.metric_records["metrics"]["num-examples"] == len(fed.private(2))
    assert content.config_records[TRUTH_KEY]["user-id"] == fed.user_ids[2]
    new = content.array_records["arrays"].to_torch_state_dict()
    assert any(not torch.equal(new[k], v) for k, v in model.state_dict().items()), "weights changed"
    again = train(_train_message(cfg, model), _context(2)).content.array_records["arrays"].to_torch_state_dict()
    assert all(np.array_equal(new[k].numpy(), again[k].numpy()) for k in new), "same seed, same update"


def test_unknown_partition_is_an_error():
    cfg = tiny_config()
    torch.manual_seed(0)
    model = build_model(cfg.model, federation(cfg, "random").corpus)
    with pytest.raises(ValueError, match="partition-id 9"):
        train(_train_message(cfg, model), _context(9))


def test_config_record_carries_the_experiment():
    conf = train_config(tiny_config(), "chrono")
    assert isinstance(conf, ConfigRecord) and conf["prior-rule"] == "chrono" and '"users":6' in str(conf["experiment"])
