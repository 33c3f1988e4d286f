"""Deep-feature property inference (seed 004 §3.2-3.3): the reconstruction recovers a sample's
last-layer features and its property, the batch's labels are read from the bias gradient, the
classifier gradient's closed form gives class-wise features; the preset refuses data and models it
cannot attack (the attack through the pool and the referee: tests/attacks/test_reconstruction.py)."""

import numpy as np
import pytest
import torch

from leakbed.attacks.feature_inference import (
    classwise_features,
    feature_split,
    gradient_distance,
    infer_labels,
    per_sample_features,
    reconstruct_features,
)
from leakbed.cli import main
from leakbed.core.models import SmallCNN
from leakbed.referee.score_reconstruction import count_accuracy, matched_accuracy
from tests.leakbed.test_bad_inputs import text_table


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def test_gradient_distance_is_zero_only_for_equal_gradients():
    g = torch.randn(100)
    assert float(gradient_distance(g, g.clone())) == pytest.approx(0.0, abs=1e-6)
    assert float(gradient_distance(g, -g)) > 2.0
    assert float(gradient_distance(g, 0.01 * g)) > 0.5  # the Gaussian-kernel term sees the scale the cosine ignores


def test_single_sample_features_are_reconstructed():
    torch.manual_seed(0)
    model = SmallCNN(3, 8, 5)
    split = feature_split(model)
    x = torch.rand(1, 3, 8, 8)
    model.zero_grad()
    torch.nn.functional.cross_entropy(model(x), torch.tensor([2])).backward()
    grads = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
    feats = reconstruct_features(split, grads, 1, 5, (3, 8, 8), steps=300, seed=1)
    true = split.features(x).detach().numpy()
    cos = float((feats @ true.T).item() / (np.linalg.norm(feats) * np.linalg.norm(true)))
    assert cos > 0.9
    rand = reconstruct_features(split, grads, 1, 5, (3, 8, 8), steps=1, seed=1)  # the dummy start
    assert float((rand @ true.T).item() / (np.linalg.norm(rand) * np.linalg.norm(true))) < cos


def _mean_ce_gradient(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, np.ndarray]:
    model.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    return {n: p.grad.numpy().copy() for n, p in model.named_parameters()}


def test_labels_are_read_from_the_output_bias_gradient():
    torch.manual_seed(0)
    model = SmallCNN(3, 8, 5)
    split = feature_split(model)
    labels = torch.tensor([4, 0, 2, 2, 0, 2, 3, 4])  # repeats; class 1 absent
    grads = _mean_ce_gradient(model, torch.rand(8, 3, 8, 8), labels)
    aux = torch.rand(200, 3, 8, 8).numpy()
    assert infer_labels(split, grads, 8, aux).tolist() == sorted(labels.tolist())
    grads["fc2.bias"] = -grads["fc2.bias"]  # a gradient that says otherwise gives other labels
    assert infer_labels(split, grads, 8, aux).tolist() != sorted(labels.tolist())


def test_classwise_features_are_the_class_means_beyond_batch_size_c():
    torch.manual_seed(0)
    model = SmallCNN(3, 8, 3)
    with torch.no_grad():
        model.fc1.bias.fill_(3.0)  # every hidden unit on: the classifier is linear, as for most units after training
    split = feature_split(model)
    labels = torch.tensor([0, 0, 0, 1, 1, 1, 1, 2, 2, 2])  # B = 10 > C = 3: samples of a class cannot be told apart
    x = torch.rand(10, 3, 8, 8)
    x[:3, :, :4, :4] += 1.0  # class 0 carries a mark the other classes lack
    grads = _mean_ce_gradient(model, x, labels)
    est = classwise_features(split, grads, labels.numpy(), torch.rand(100, 3, 8, 8).numpy())
    true = split.features(x).detach()
    means = torch.stack([true[labels == c].mean(0) for c in labels])
    cos = torch.nn.functional.cosine_similarity(est, means)
    assert float(cos.min()) > 0.95
    err_own = (est[0] - means[0]).norm()
    assert err_own < 0.5 * (est[0] - means[5]).norm()  # closer to its own class mean than to another's


def _two_class_batch(bias: float) -> tuple:
    torch.manual_seed(1)
    model = SmallCNN(3, 8, 3)
    with torch.no_grad():
        model.fc1.bias.fill_(bias)
    labels = torch.tensor([0, 0, 1, 1, 2, 2])  # two samples per class
    x = torch.rand(6, 3, 8, 8)
    return feature_split(model), x, labels, _mean_ce_gradient(model, x, labels)


def test_per_sample_features_are_exact_for_one_sample_from_a_class_wise_start():
    torch.manual_seed(3)
    model = SmallCNN(3, 8, 4)
    split = feature_split(model)
    x, label = torch.rand(1, 3, 8, 8), torch.tensor([2])
    grads = _mean_ce_gradient(model, x, label)
    true = split.features(x).detach()
    start = classwise_features(split, grads, label.numpy(), torch.rand(50, 3, 8, 8).numpy())
    est = per_sample_features(split, grads, label.numpy(), start)
    assert float((est - true).norm() / true.norm()) < 1e-4  # direction and scale: the bias column fixes the scale


def test_per_sample_features_stay_class_wise_when_every_unit_is_on():
    split, x, labels, grads = _two_class_batch(bias=3.0)  # linear classifier: only class sums are determined
    true = split.features(x).detach()
    near = (true * (1 + 0.05 * torch.randn(true.shape, generator=torch.Generator().manual_seed(2)))).clamp_min(0)
    est = per_sample_features(split, grads, labels.numpy(), near)
    assert float((est - true).norm() / true.norm()) > 0.05  # even from 5% off, class-mates are not told apart


def test_count_accuracy_needs_no_matching_and_matching_uses_the_truth():
    labels = np.array([1, 0, 0, 1])
    pred = np.array([0.9, 0.8, 0.1, 0.2])
    assert count_accuracy(pred, labels) == 1.0  # two predicted, two true: counts agree whatever the order
    recon = np.eye(4)
    true = np.eye(4)[[0, 2, 1, 3]]  # reconstruction 1 is sample 2, reconstruction 2 is sample 1
    acc, dist = matched_accuracy(recon, true, pred, labels[[0, 2, 1, 3]], "cosine")
    assert acc == 0.5 and dist == pytest.approx(0.0, abs=1e-9)  # matched pairs: (0.9, 1) (0.8, 0) (0.1, 0) (0.2, 1)


def test_reconstruction_needs_auxiliary_data_for_inferred_labels():
    split = feature_split(SmallCNN(3, 8, 5))
    for option in ({"labels": "inferred"}, {"init": "analytic"}):
        with pytest.raises(ValueError, match="aux"):
            reconstruct_features(split, {}, 2, 5, (3, 8, 8), **option)


def test_the_preset_refuses_what_it_cannot_attack_before_anything_starts(tmp_path, capsys):
    for sets, field in (
        (["model.name='resnet18'"], "needs model.name cnn"),
        (
            [
                "data.source='table'",
                f"data.path='{text_table(tmp_path / 'posts.jsonl', labels=True)}'",
                "data.min_examples=2",
                'split.priors=["random"]',
            ],
            "'feature-inference' needs image data",
        ),
        (["fl.optimizer='adam'"], "fl.optimizer"),
        (["fl.momentum=0.9"], "fl.momentum = 0"),
    ):
        out = tmp_path / "o"
        code = main(["feature-inference", *[a for s in sets for a in ("--set", s)], "--out", str(out)])
        err = capsys.readouterr().err.strip()
        assert code == 2 and "\n" not in err and err.startswith("leakbed: error:"), err
        assert field in err and not out.exists(), err
