"""Deep-feature property inference (seed 004 §3.2-3.3): the reconstruction recovers a sample's
last-layer features and its property, the batch's labels are read from the bias gradient, the
classifier gradient's closed form gives class-wise features, the attack with that start beats
chance at batch 8 where pixel-space DLG falls to it, and a classifier trained on shuffled property
labels is at chance."""

import json

import numpy as np
import pytest
import torch

import leakbed.feature_eval as feature_eval
from attacks.feature_inference import (
    classwise_features,
    feature_split,
    gradient_distance,
    infer_labels,
    per_sample_features,
    reconstruct_features,
)
from core.models import SmallCNN
from leakbed.cli import main
from tests.conftest import tiny_config


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _small_eval(*overrides: str):
    return tiny_config(
        "data.synthetic.users=10",
        "data.synthetic.image_size=16",
        "split.priors=['random']",
        "attack.feature_inference.batch_sizes=[1, 8]",
        "attack.feature_inference.batches=3",
        "attack.feature_inference.rounds=2",
        "attack.feature_inference.aux_examples=400",
        "attack.feature_inference.classifier_epochs=30",
        "attack.feature_inference.classifier_lr=1e-3",
        "attack.feature_inference.steps=100",
        "attack.feature_inference.step_size=0.001",
        "attack.feature_inference.labels='inferred'",
        "attack.feature_inference.init='analytic'",
        "attack.feature_inference.schedule='cosine'",
        "attack.feature_inference.nonnegative=true",
        "attack.feature_inference.dlg_steps=3",
        *overrides,
    )


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


def test_count_chance_and_matching():
    assert feature_eval.count_chance(1) == pytest.approx(0.5)
    assert 0.79 < feature_eval.count_chance(8) < 0.81  # why the matched per-sample accuracy is the headline
    labels = np.array([1, 0, 0, 1])
    assert feature_eval.count_accuracy(np.array([0.9, 0.8, 0.1, 0.2]), labels) == 1.0


def test_reconstruction_needs_auxiliary_data_for_inferred_labels():
    split = feature_split(SmallCNN(3, 8, 5))
    for option in ({"labels": "inferred"}, {"init": "analytic"}):
        with pytest.raises(ValueError, match="aux"):
            reconstruct_features(split, {}, 2, 5, (3, 8, 8), **option)


def test_property_is_inferred_at_batch_1_and_8_where_dlg_falls(tmp_path):
    result = feature_eval.evaluate(_small_eval("attack.feature_inference.batches=4"), tmp_path)
    one, eight = result["by_batch_size"]["1"], result["by_batch_size"]["8"]
    assert eight["oracle_feature_acc"] >= 0.8  # the property is in the deep features
    assert one["feature_acc"] >= 0.9
    assert eight["feature_acc"] >= 0.68  # 32 samples: chance would reach this with p < 0.03
    assert eight["dlg_acc"] <= 0.7
    assert (tmp_path / "feature_inference.md").read_text().count("| 8 |") == 1


def test_shuffled_property_labels_fall_to_chance(tmp_path, monkeypatch):
    real = feature_eval.train_property_net
    rng = np.random.default_rng(0)
    monkeypatch.setattr(feature_eval, "train_property_net", lambda x, labels, **kw: real(x, rng.permutation(labels), **kw))
    cfg = _small_eval("attack.feature_inference.batches=4", "attack.feature_inference.batch_sizes=[8]")
    r = feature_eval.evaluate(cfg, tmp_path)["by_batch_size"]["8"]
    assert 0.25 <= r["feature_acc"] <= 0.75
    assert 0.25 <= r["oracle_feature_acc"] <= 0.75


def test_cli_rejects_a_missing_property_before_training(tmp_path, capsys):
    code = main(["feature-inference", "--set", "attack.feature_inference.property='nosuch'", "--out", str(tmp_path / "o")])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert "nosuch" in err and "\n" not in err
    assert not (tmp_path / "o").exists()
    code = main(["feature-inference", "--batch-sizes", "0,8", "--out", str(tmp_path / "o")])
    assert code == 2 and "batch_sizes" in capsys.readouterr().err


def test_results_are_deterministic(tmp_path):
    cfg = _small_eval(
        "attack.feature_inference.batches=1", "attack.feature_inference.steps=20", "attack.feature_inference.classifier_epochs=2"
    )
    a = feature_eval.evaluate(cfg, tmp_path / "a")
    b = feature_eval.evaluate(cfg, tmp_path / "b")
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
