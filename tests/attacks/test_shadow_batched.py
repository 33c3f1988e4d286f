"""The batched shadow updates (core.batched_training) equal the one-user-at-a-time loop's, for every
model we ship, users of different sizes, SGD with momentum and Adam, full epochs and local steps.

The reference is the loop ``attacks.shadow`` ran before (and still runs with shadow_batch_users = 0):
per user, load the global arrays, ``torch.manual_seed(seed)``, ``local_update``, ``delta_vector``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from torch import nn

import leakbed.attacks.shadow as shadow
import leakbed.core.batched_training as batched_training
from leakbed.attacks.shadow import batchable, shadow_seed, shadow_updates
from leakbed.core.batched_training import batched_local_updates, unsupported
from leakbed.core.config import ModelConfig
from leakbed.core.data.corpus import Corpus, UserData
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.models import attack_keys, build_model
from leakbed.core.records import RoundSnapshot
from leakbed.core.training import TrainConfig, load_arrays, local_update, state_arrays
from leakbed.core.updates import delta_vector

CPU = torch.device("cpu")
VOCAB = 30
SIZES = [7, 13, 5, 10, 0, 6]  # ragged: different step counts and last batches; one user without prior data
# Batch norm on a batch of 1 or 2 is degenerate (an error, or outputs of ±1 whose gradient is rounding
# noise): in the loop as much as here. These sizes give batches of 3 and 4 only, still ragged.
BN_SIZES = [7, 4, 0, 3]
# model -> (task, input shape, epochs). MobileNet and ResNet at 64x64, the smallest where their last
# batch norm sees more than one value per channel and example, and one epoch: a few steps on noise
# with tiny batches is where their training still is well-conditioned (at 32x32, or with batches of 2,
# the loop's own normalised Δw moves by 1e-2 when the global weights move by 1e-7).
CASES = {
    "cnn": ("multiclass", (3, 8, 8), 2),
    "lstm-lm": ("next-token", (9,), 2),
    "lstm-classifier": ("multiclass", (9,), 2),
    "mobilenet_v3_small": ("multiclass", (3, 64, 64), 1),
    "resnet18": ("multiclass", (3, 64, 64), 1),
}
TOL = 1e-5  # on L2-normalised Δw; raw Δw: TOL times its norm
# (optimizer, lr, momentum, steps): SGD with momentum and Adam (its usual lr), full epochs and local steps
TRAININGS = [("sgd", 0.1, 0.9, 0), ("sgd", 0.1, 0.9, 3), ("adam", 1e-3, 0.0, 0), ("adam", 1e-3, 0.0, 3)]
LR_SCALE = {"resnet18": 0.1}  # ResNet18 on noise is chaotic at lr 0.1 in the loop itself (as above)


def _users(task: str, shape: tuple[int, ...], classes: int, seed: int, sizes: list[int]) -> dict[str, UserData]:
    rng = np.random.default_rng(seed)
    out = {}
    for i, n in enumerate(sizes):
        if len(shape) == 3:
            x = rng.random((n, *shape), dtype=np.float32)
        else:
            x = rng.integers(1, VOCAB, (n, *shape))
            x[:, :2] = 0  # left padding, as short texts have
        if task == "next-token":
            y = np.roll(x, -1, axis=1)
            y[:, -1] = rng.integers(0, VOCAB, n)  # some targets are <pad> = 0: ignored by the loss
        elif task == "multilabel":
            y = (rng.random((n, classes)) < 0.3).astype(np.float32)
        else:
            y = rng.integers(0, classes, n)
        out[f"u{i}"] = UserData(x, y, np.arange(n, dtype=np.float64))
    return out


def _setup(
    name: str, *, task: str | None = None, batch_users: int = 64, seed: int = 0
) -> tuple[AttackerKnowledge, dict[str, np.ndarray]]:
    """(knowledge, global arrays) for a tiny corpus of ``name``'s kind."""
    default_task, shape, _ = CASES[name]
    task = task or default_task
    classes = VOCAB if task == "next-token" else 4
    vocab = tuple(f"w{i}" for i in range(VOCAB)) if len(shape) == 1 else None
    corpus = Corpus("tiny", task, classes, shape, {}, vocab)  # type: ignore[arg-type]
    torch.manual_seed(seed)
    model_cfg = ModelConfig(name=name)
    model = build_model(model_cfg, corpus)
    knowledge = AttackerKnowledge(
        prior=_users(task, shape, classes, seed, BN_SIZES if CASES[name][2] == 1 else SIZES),
        corpus_meta=corpus,
        model=model_cfg,
        shadow_batch_users=batch_users,
        keys=attack_keys(model, ["final"]),
        seed=7,
        device="cpu",
    )
    return knowledge, state_arrays(model)


def _train(optimizer: str, lr: float, momentum: float, steps: int, epochs: int = 2) -> dict[str, float | int | str]:
    return TrainConfig(epochs=epochs, batch_size=4, lr=lr, optimizer=optimizer, momentum=momentum, steps=steps).to_config()


def _loop(knowledge: AttackerKnowledge, snap: RoundSnapshot) -> tuple[list[str], np.ndarray, dict[str, dict[str, np.ndarray]]]:
    """The reference: shadow_updates' one-user-at-a-time loop, also returning each user's raw local arrays."""
    cfg = TrainConfig.from_config(snap.train_config)
    model = build_model(knowledge.model, knowledge.corpus_meta)
    labels, vectors, local = [], [], {}
    for user, data in knowledge.prior.items():
        load_arrays(model, snap.arrays)
        seed = shadow_seed(knowledge, snap.round, user)
        torch.manual_seed(seed)
        local_update(model, data, knowledge.corpus_meta.task, cfg, seed=seed, device=CPU)
        local[user] = state_arrays(model)
        vectors.append(delta_vector(snap.arrays, local[user], knowledge.keys))
        labels.append(user)
    return labels, np.stack(vectors), local


# ResNet18 is the slowest to train here: one case per optimizer (local steps: the other models)
PAIRS = [(n, t) for n in CASES for t in TRAININGS if n != "resnet18" or t[3] == 0]


@pytest.mark.long
@pytest.mark.parametrize(("name", "training"), PAIRS, ids=[f"{n}-{t[0]}-steps{t[3]}" for n, t in PAIRS])
def test_batched_shadow_updates_equal_the_loop(name: str, training: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.set_num_threads(1)  # as attack workers run
    knowledge, arrays = _setup(name)
    optimizer, lr, momentum, steps = training
    epochs, tol = CASES[name][2], TOL
    snap = RoundSnapshot(3, arrays, _train(optimizer, lr * LR_SCALE.get(name, 1.0), momentum, steps, epochs))
    assert batchable(knowledge, build_model(knowledge.model, knowledge.corpus_meta))
    raw: dict[int, dict[str, np.ndarray]] = {}

    def spy(*args: object, seeds: list[int], **kwargs: object) -> dict[str, torch.Tensor]:
        out = batched_local_updates(*args, seeds=seeds, **kwargs)  # type: ignore[arg-type]
        raw.update({s: {k: v[i].numpy() for k, v in out.items()} for i, s in enumerate(seeds)})
        return out

    monkeypatch.setattr(shadow, "batched_local_updates", spy)
    labels, vectors = shadow_updates(knowledge, snap)
    want_labels, want, local = _loop(knowledge, snap)
    assert labels == want_labels and len(raw) == len(labels)
    np.testing.assert_allclose(vectors, want, rtol=1e-4, atol=tol)  # L2-normalised Δw
    assert not np.any(vectors[[len(d) == 0 for d in knowledge.prior.values()]])  # no prior data: no update
    for user in labels:  # raw Δw = global - local, before normalisation, on every attack parameter
        got = raw[shadow_seed(knowledge, snap.round, user)]
        delta = {k: arrays[k] - local[user][k] for k in knowledge.keys}
        scale = float(np.sqrt(sum(np.sum(np.square(d, dtype=np.float64)) for d in delta.values())))
        for key in knowledge.keys:
            np.testing.assert_allclose(arrays[key] - got[key], delta[key], rtol=1e-4, atol=tol * scale + 1e-9)


@pytest.mark.parametrize("training", [TRAININGS[0], TRAININGS[3]], ids=["sgd-steps0", "adam-steps3"])
def test_next_token_without_the_fused_head_equals_the_loop(training: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    """The vmapped logits and masked cross-entropy that CUDA runs (the CPU fuses head and loss)."""
    monkeypatch.setattr(batched_training, "FUSED_HEAD_DEVICES", ())
    knowledge, arrays = _setup("lstm-lm", seed=3)
    snap = RoundSnapshot(1, arrays, _train(*training))
    labels, vectors = shadow_updates(knowledge, snap)
    want_labels, want, _ = _loop(knowledge, snap)
    assert labels == want_labels
    np.testing.assert_allclose(vectors, want, rtol=1e-4, atol=TOL)


def test_a_different_seed_gives_different_vectors() -> None:
    """The comparison above can fail: another attacker seed shuffles other batches."""
    knowledge, arrays = _setup("cnn")
    snap = RoundSnapshot(1, arrays, _train("sgd", 0.1, 0.9, 0))
    _, vectors = shadow_updates(knowledge, snap)
    _, other, _ = _loop(replace(knowledge, seed=8), snap)
    moved = [i for i, n in enumerate(SIZES) if n > 4]  # more than one batch: the order matters
    assert not np.allclose(vectors[moved], other[moved], rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("batch_users", [0, 1, 2, 64])
def test_chunks_multilabel_and_the_plain_loop_equal_the_reference(batch_users: int) -> None:
    knowledge, arrays = _setup("cnn", task="multilabel", batch_users=batch_users, seed=1)
    snap = RoundSnapshot(2, arrays, _train("sgd", 0.1, 0.5, 0))
    model = build_model(knowledge.model, knowledge.corpus_meta)
    assert batchable(knowledge, model) == bool(batch_users)
    labels, vectors = shadow_updates(knowledge, snap)
    want_labels, want, _ = _loop(knowledge, snap)
    assert labels == want_labels
    np.testing.assert_allclose(vectors, want, rtol=1e-4, atol=1e-5 if batch_users else 0.0)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_batch_norm_groups_and_dropout_masks_equal_the_loop(optimizer: str) -> None:
    """Batch norm (one call per run of equal batch sizes) and dropout (the loop's masks) in a net
    well-conditioned enough to hold the loop to 1e-5 on every parameter."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    conv = [nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU()]
    model = nn.Sequential(*conv, nn.Flatten(), nn.Dropout(0.3), nn.Linear(8 * 64, 4))
    data = list(_users("multiclass", (3, 8, 8), 4, 2, [7, 11, 8, 15, 0, 12]).values())
    arrays, keys = state_arrays(model), [k for k, _ in model.named_parameters()]
    cfg = TrainConfig(2, 4, 0.1 if optimizer == "sgd" else 1e-3, optimizer, 0.9, 0)
    seeds = [3, 4, 5, 6, 7, 8]
    got = batched_local_updates(model, arrays, data, "multiclass", cfg, seeds=seeds, device=CPU, keys=keys)
    for u, (d, s) in enumerate(zip(data, seeds, strict=True)):
        load_arrays(model, arrays)
        torch.manual_seed(s)
        local_update(model, d, "multiclass", cfg, seed=s, device=CPU)
        for key in keys:
            want = arrays[key] - model.state_dict()[key].numpy()
            np.testing.assert_allclose(arrays[key] - got[key][u].numpy(), want, rtol=1e-4, atol=1e-5 * np.abs(want).max() + 1e-9)
    model[4].p = 0.0  # without dropout the updates differ: the masks above were the loop's, not none
    plain = batched_local_updates(model, arrays, data, "multiclass", cfg, seeds=seeds, device=CPU, keys=keys)
    assert not np.allclose(plain[keys[-2]].numpy(), got[keys[-2]].numpy(), atol=1e-4)


def test_models_the_batched_path_cannot_express_fall_back() -> None:
    class GRUModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gru = nn.GRU(4, 4, batch_first=True)
            self.fc = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(self.gru(x)[0][:, -1])

    class TwiceDropout(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.drop = nn.Dropout(0.5)
            self.fc = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(self.drop(self.drop(x)))

    assert "GRU" in (unsupported(GRUModel()) or "")
    assert "unidirectional" in (unsupported(nn.Sequential(nn.LSTM(4, 4, bidirectional=True))) or "")
    assert "Dropout2d" in (unsupported(nn.Sequential(nn.Dropout2d(0.5))) or "")
    assert "more than once" in (unsupported(TwiceDropout(), torch.zeros(1, 4)) or "")
    assert "buffer" in (unsupported(nn.Sequential(nn.InstanceNorm1d(4, track_running_stats=True))) or "")
    assert unsupported(TwiceDropout()) is None
    knowledge, _ = _setup("cnn")
    model = build_model(knowledge.model, knowledge.corpus_meta)
    assert batchable(knowledge, model)
    assert not batchable(replace(knowledge, keys=[*knowledge.keys, "features.0.running_mean"]), model)  # not a parameter
