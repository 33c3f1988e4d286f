import numpy as np
import torch

from core.config import ModelConfig
from core.data import federation
from core.models import build_model
from core.training import TrainConfig, evaluate, local_update, pick_device, state_arrays
from core.updates import delta_vector
from tests.conftest import tiny_config


def _setup():
    fed = federation(tiny_config(), "random")
    torch.manual_seed(0)
    return fed, build_model(ModelConfig(), fed.corpus)


def test_local_update_learns_and_is_deterministic():
    fed, model = _setup()
    start = state_arrays(model)
    data = fed.private(0)
    cpu = torch.device("cpu")
    cfg = TrainConfig(epochs=10, batch_size=8, lr=0.1, optimizer="sgd", momentum=0.9)
    before = evaluate(model, data, "multiclass", device=cpu)["loss"]
    local_update(model, data, "multiclass", cfg, seed=1, device=cpu)
    after = evaluate(model, data, "multiclass", device=cpu)["loss"]
    assert after < 0.9 * before, (before, after)
    first = state_arrays(model)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in start.items()})
    local_update(model, data, "multiclass", cfg, seed=1, device=cpu)
    assert all(np.array_equal(first[k], v) for k, v in state_arrays(model).items())


def test_delta_vector_is_unit_norm_global_minus_local():
    g = {"a": np.ones((2, 2), np.float32), "b": np.zeros(3, np.float32)}
    local = {"a": np.zeros((2, 2), np.float32), "b": np.zeros(3, np.float32)}
    v = delta_vector(g, local, ["a"])
    assert v.shape == (4,) and np.isclose(np.linalg.norm(v), 1.0) and (v > 0).all()
    assert not delta_vector(g, g, ["a", "b"]).any()


def test_device_selection_prefers_cuda_when_present(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_device("auto").type == "cuda"
    assert pick_device("cpu").type == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_device("auto").type == "cpu"


def test_utility_metrics_by_task():
    fed, model = _setup()
    m = evaluate(model, fed.test_set(), "multiclass", device=torch.device("cpu"))
    assert 0.0 <= m["accuracy"] <= 1.0 and m["utility"] == m["accuracy"]
