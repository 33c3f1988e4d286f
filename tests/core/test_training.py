import numpy as np
import torch

from leakbed.core.config import ModelConfig
from leakbed.core.data import federation
from leakbed.core.models import build_model
from leakbed.core.training import TrainConfig, evaluate, local_update, pick_device, state_arrays
from leakbed.core.updates import delta_vector
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


def _whole_tensor_utility(model, data, batch_size):
    """The next-token utility as evaluate computed it before it streamed: every batch's logits concatenated,
    cross_entropy and the top-5 over the whole tensor (the reference the streamed values must equal exactly)."""
    from leakbed.core.training import loss_fn

    with torch.no_grad():
        model.eval()
        outs = [model(torch.from_numpy(data.x[i : i + batch_size])) for i in range(0, len(data), batch_size)]
        logits, y = torch.cat(outs), torch.from_numpy(data.y)
        loss = float(loss_fn("next-token", logits, y))
        hit = (logits.topk(5, dim=-1).indices == y.unsqueeze(-1)).any(-1)
        return {"loss": loss, "top5": float(hit[y != 0].float().mean())}


def _lm_test_set(n, length=12, vocab=300, seed=0):
    from leakbed.core.data.corpus import UserData

    rng = np.random.default_rng(seed)
    x = rng.integers(1, vocab, size=(n, length + 1))
    x[length // 2 + rng.integers(0, length // 2, size=n)[:, None] <= np.arange(length + 1)] = 0  # padded tails
    return UserData(np.ascontiguousarray(x[:, :-1]), np.ascontiguousarray(x[:, 1:]), np.zeros(n))


def test_next_token_utility_streams_batches_and_gives_the_whole_tensors_values(monkeypatch):
    from leakbed.core import training
    from leakbed.core.models import LSTMLanguageModel

    torch.manual_seed(0)
    model = LSTMLanguageModel(300)
    data = _lm_test_set(70)
    cpu = torch.device("cpu")
    monkeypatch.setattr(training, "EVAL_CHUNK_BYTES", 300 * 4 * 50)  # several log-softmax chunks per batch
    for _ in range(2):  # the initial model, then a trained one
        got = evaluate(model, data, "next-token", device=cpu, batch_size=16)  # 5 batches, the last one partial
        assert {k: got[k] for k in ("loss", "top5")} == _whole_tensor_utility(model, data, 16)  # bit for bit
        assert got["utility"] == got["top5"]
        local_update(model, data, "next-token", TrainConfig(1, 8, 0.5, "sgd", 0.0), seed=1, device=cpu)


class _Largest(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the largest tensor any operation produces (elements)."""

    largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def test_next_token_evaluation_holds_one_batch_of_logits_whatever_the_test_set():
    """The server's utility evaluation held the whole test set's (N, L, V) logits, three times over: 10 GB of the
    ServerApp's memory on a 50-user language model. Its largest tensor is now one batch's logits."""
    from leakbed.core.models import LSTMLanguageModel

    torch.manual_seed(0)
    model = LSTMLanguageModel(300)
    for n in (40, 400):
        mode = _Largest()
        with mode:
            evaluate(model, _lm_test_set(n), "next-token", device=torch.device("cpu"), batch_size=16)
        assert mode.largest == 16 * 12 * 300, (n, mode.largest)  # one batch's logits, never more
