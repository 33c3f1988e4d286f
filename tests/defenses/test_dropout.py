"""Dropout in local training (seed 002 §7.3.3) changes a device's training only when it is on."""

import numpy as np
import pytest
import torch

from leakbed.client.app import app
from leakbed.core.data import federation
from leakbed.core.models import LSTMLanguageModel, build_model
from leakbed.core.training import TrainConfig, local_update, state_arrays
from leakbed.defenses.dropout import dropout_during
from leakbed.preflight import resolve
from tests.client.test_client_app import _context, _train_message, handler
from tests.conftest import tiny_config


def _trained(p: float) -> dict[str, np.ndarray]:
    cfg = tiny_config()
    fed = federation(cfg, "random")
    torch.manual_seed(0)
    model = build_model(cfg.model, fed.corpus)
    torch.manual_seed(1)
    with dropout_during(model, p) as places:
        local_update(
            model, fed.private(0), fed.corpus.task, TrainConfig(1, 8, 0.1, "sgd", 0.0), seed=1, device=torch.device("cpu")
        )
    assert places == (2 if p else 0)  # after both max-pool layers of the CNN
    return state_arrays(model)


def test_dropout_changes_training_only_when_on_and_leaves_no_hook():
    off, again, on = _trained(0.0), _trained(0.0), _trained(0.5)
    assert all(np.array_equal(off[k], again[k]) for k in off)
    assert max(float(np.abs(off[k] - on[k]).max()) for k in off) > 1e-4
    cfg = tiny_config()
    torch.manual_seed(0)
    model = build_model(cfg.model, federation(cfg, "random").corpus)
    x = torch.rand(4, 3, 8, 8)
    with dropout_during(model, 0.9):
        pass
    model.train()
    assert torch.equal(model(x), model(x))  # hooks are gone: no randomness left


def test_without_pooling_dropout_acts_before_the_final_layer():
    model = LSTMLanguageModel(20)
    x = torch.randint(0, 20, (2, 5))
    with dropout_during(model, 0.5) as places:
        model.train()
        assert places == 1 and not torch.equal(model(x), model(x))
        model.eval()
        assert torch.equal(model(x), model(x))  # dropout is a training-time defense


def test_the_device_trains_with_dropout_only_when_its_user_adopts_it():
    cfg = tiny_config('defenses=[{name="dropout", p=0.5, users=["user2"]}]')
    fed = federation(cfg, "random")
    torch.manual_seed(0)
    model = build_model(cfg.model, fed.corpus)
    for pid, changed in ((2, True), (3, False)):
        a = app(_train_message(cfg, model), _context(pid)).content["arrays"]
        b = handler(_train_message(tiny_config(), model), _context(pid)).content["arrays"]
        diff = max(float(np.abs(a[k].numpy() - b[k].numpy()).max()) for k in a)
        assert (diff > 0) == changed, (pid, diff)


def test_dropout_probability_must_be_below_one():
    with pytest.raises(ValueError, match=r"defenses.0 \(dropout\).p: Input should be less than 1"):
        resolve(tiny_config('defenses=[{name="dropout", p=1.0}]'))
    assert resolve(tiny_config('defenses=[{name="dropout"}]')).defenses[0].params == {"p": 0.5}  # frozen with its default
