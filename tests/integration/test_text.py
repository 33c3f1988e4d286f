"""The text path end to end: Shakespeare roles (TFF HDF5) through the LSTM language model."""

import pytest

from leakbed.core.layout import RunLayout
from leakbed.core.store import UpdateStore
from leakbed.simulate import simulate
from tests.conftest import SHARED_DATA, tiny_config

pytestmark = [pytest.mark.slow, pytest.mark.shared_data("shakespeare")]


def test_shakespeare_roles_train_an_lstm_and_are_attacked(tmp_path):
    cfg = tiny_config(
        "data.source='tff-hdf5'",
        f"data.path='{SHARED_DATA / 'shakespeare'}'",
        "data.max_users=4",
        "data.min_examples=30",
        "fl.rounds=2",
        "fl.fraction_train=0.5",
        'split.priors=["random"]',
        'attack.suite=["knn"]',  # nothing here reads an attacker's score: one lane, not three
    )
    run = simulate(cfg, "random", tmp_path)
    assert run["users"] == 4 and run["attack_layers"] == ["fc.weight", "fc.bias"]
    assert run["pool"]["tapped"] == run["pool"]["analysed"] == 4
    u = run["utility"]
    # the language model learns: next-character top-5 accuracy from about the untrained model's
    # (measured 0.07) to more than twice that in two rounds (measured 0.25), with the loss falling
    assert u["0"]["top5"] < 0.15 and u["2"]["top5"] > max(2 * u["0"]["top5"], 0.15), u
    assert u["2"]["loss"] < u["1"]["loss"] < u["0"]["loss"], u
    vectors = UpdateStore(RunLayout(tmp_path).store("random")).read_anon()["vectors"]
    vocab = vectors.shape[1] // 65  # fc: 64 hidden units + bias per vocabulary entry
    assert vectors.shape == (4, 65 * vocab) and vocab > 60
