"""The adversarial participant (seed 002 §7.1.5): its joint loss reduces to the honest update at
α = 1, the property head learns the property at α < 1, and across rounds it scores the previous
round's aggregate from what a participant sees (state kept in the ClientApp's context)."""

import copy

import numpy as np
import pytest
import torch
from flwr.app import RecordDict

from client.adversary import adversary_round, participants_per_round
from leakbed.config import ConfigError, build_config
from leakbed.data import federation
from leakbed.models import build_model
from leakbed.multitask import _with_hidden, check_adversary, hidden_size, multitask_update
from leakbed.training import TrainConfig, local_update, state_arrays
from tests.conftest import tiny_config


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _setup(*overrides: str):
    cfg = tiny_config("adversary.users=['user0']", "fl.local_steps=1", "data.synthetic.property_rate=0.5", *overrides)
    fed = federation(cfg, "random")
    torch.manual_seed(0)
    return cfg, fed, build_model(cfg.model, fed.corpus)


def test_alpha_one_is_exactly_the_honest_update():
    cfg, fed, model = _setup()
    data = fed.private(0)
    tcfg = TrainConfig(1, 8, 0.1, "sgd", 0.0, 0)
    honest, adversarial = copy.deepcopy(model), copy.deepcopy(model)
    local_update(honest, data, "multiclass", tcfg, seed=3, device=torch.device("cpu"))
    head = torch.nn.Linear(hidden_size(model), 1)
    multitask_update(adversarial, head, data, data.attrs["property"], "multiclass", tcfg, 1.0, seed=3, device=torch.device("cpu"))
    a, b = state_arrays(honest), state_arrays(adversarial)
    assert all(np.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_joint_loss_teaches_the_head_the_property():
    cfg, fed, model = _setup("data.synthetic.bias=0", "data.synthetic.examples_per_user=80")
    data = fed.private(0)
    prop = data.attrs["property"]
    head = torch.nn.Linear(hidden_size(model), 1)
    tcfg = TrainConfig(50, 8, 0.1, "sgd", 0.0, 0)
    multitask_update(model, head, data, prop, "multiclass", tcfg, 0.3, seed=1, device=torch.device("cpu"))
    with torch.no_grad():
        _, hidden = _with_hidden(model, torch.from_numpy(data.x))
        pred = (head(hidden).squeeze(1) > 0).numpy()
    assert 0.3 < prop.mean() < 0.7 and np.mean(pred == (prop == 1)) >= 0.85


def test_rounds_give_a_score_for_the_previous_aggregate():
    cfg, fed, model = _setup()
    state = RecordDict()
    tcfg = TrainConfig(1, cfg.fl.batch_size, cfg.fl.lr, "sgd", 0.0, 1)
    k = participants_per_round(cfg, len(fed.user_ids))
    assert k == 3
    first = copy.deepcopy(model)
    loss, facts = adversary_round(cfg, fed, 0, first, tcfg, rnd=1, seed=1, device=torch.device("cpu"), state=state)
    assert facts == {"adversary": 1} and loss > 0  # nothing observed yet
    # the server aggregates: the adversary's update and two honest ones
    glob = state_arrays(model)
    deltas = [{k_: glob[k_] - v for k_, v in state_arrays(first).items()}]
    for pid in (1, 2):
        honest = copy.deepcopy(model)
        local_update(honest, fed.private(pid), "multiclass", tcfg, seed=pid, device=torch.device("cpu"))
        deltas.append({k_: glob[k_] - v for k_, v in state_arrays(honest).items()})
    nxt = copy.deepcopy(model)
    nxt.load_state_dict({k_: torch.from_numpy(glob[k_] - np.mean([d[k_] for d in deltas], axis=0)) for k_ in glob})
    _, facts = adversary_round(cfg, fed, 0, nxt, tcfg, rnd=2, seed=2, device=torch.device("cpu"), state=state)
    assert facts["adv-round"] == 1 and 0.0 <= facts["adv-score"] <= 1.0
    # a gap in participation (not sampled in round 3) means no score for round 3
    _, facts = adversary_round(cfg, fed, 0, copy.deepcopy(nxt), tcfg, rnd=4, seed=4, device=torch.device("cpu"), state=state)
    assert "adv-score" not in facts


def test_bad_adversary_config_fails_in_one_line():
    cfg, fed, _ = _setup("adversary.users=['nobody']")
    with pytest.raises(ValueError, match="'nobody' is not a user"):
        check_adversary(cfg, fed)
    with pytest.raises(ConfigError, match="adversary.alpha"):
        build_config({}, ["adversary.alpha=1.5"])
    with pytest.raises(ConfigError, match="must not repeat"):
        build_config({}, ["adversary.users=['user0', 'user0']"])
