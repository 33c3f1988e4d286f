"""DLG (the pixel-space baseline of seed 004 Table 1): exact for one sample on a linear model,
and no longer able to tell the samples of a batch apart."""

import numpy as np
import pytest
import torch
from torch import nn

from leakbed.attacks.dlg import dlg_reconstruct
from leakbed.referee.score_reconstruction import matched_accuracy


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _linear_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 4 * 4, 10))


def _gradient(model: nn.Module, x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    model.zero_grad()
    nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y)).backward()
    return {n: p.grad.numpy().copy() for n, p in model.named_parameters()}


def _mse(recon: np.ndarray, true: np.ndarray) -> float:
    cost = ((recon[:, None] - true[None]) ** 2).reshape(len(recon), len(true), -1).mean(-1)
    return float(cost.min(axis=1).mean())


def test_dlg_recovers_a_single_image_and_its_label():
    model = _linear_model()
    rng = np.random.default_rng(0)
    x = rng.random((1, 3, 4, 4)).astype(np.float32)
    y = np.array([3])
    images, labels = dlg_reconstruct(model, _gradient(model, x, y), 1, 10, (3, 4, 4), steps=3, seed=1)
    assert labels.tolist() == [3]
    assert _mse(images, x) < 1e-3  # a random image is ~0.17 away


def test_dlg_falls_apart_on_a_batch():
    model = _linear_model()
    rng = np.random.default_rng(1)
    x = rng.random((8, 3, 4, 4)).astype(np.float32)
    y = rng.integers(0, 10, 8)
    images, _ = dlg_reconstruct(model, _gradient(model, x, y), 8, 10, (3, 4, 4), steps=5, seed=1)
    assert _mse(images, x) > 0.01  # the summed gradient of 8 images does not pin down each one


def test_matched_accuracy_ignores_order():
    rng = np.random.default_rng(2)
    true = rng.random((6, 5))
    labels = np.array([1, 0, 1, 1, 0, 0])
    perm = rng.permutation(6)
    pred = labels[perm].astype(float)
    assert matched_accuracy(true[perm], true, pred, labels, "mse")[0] == 1.0
    assert matched_accuracy(true[perm], true, 1 - pred, labels, "cosine")[0] == 0.0
