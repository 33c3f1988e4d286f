"""The SecAgg+ device is the plain device (issue 13.3): ``client.app:app`` hands SecAgg+ stage messages
to it, and its ``fit`` trains through the plain train handler behind the same Mods, so the update-level
defenses apply under SecAgg+ as without it."""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import ConfigRecord, RecordDict

import leakbed.client.app as plain
from leakbed.client.secagg import SecAggDevice
from leakbed.core.data import federation
from leakbed.core.models import build_model
from leakbed.server.plan import device_plan
from leakbed.server.run_parts import train_config
from tests.conftest import fake_message, tiny_config


def _fit(*overrides: str) -> tuple[np.ndarray, int, dict]:
    """User 1's first-round SecAgg+ fit: its Δw (flattened), example count and fit metrics."""
    cfg = tiny_config('split.priors=["random"]', *overrides)
    torch.manual_seed(0)
    glob = [v.numpy().copy() for v in build_model(cfg.model, federation(cfg, "random").corpus).state_dict().values()]
    plan = device_plan(cfg, "random", federation(cfg, "random").user_ids)
    config = {**dict(train_config(cfg, plan).items()), "server-round": 1}
    weights, n, metrics = SecAggDevice(1).fit(glob, config)
    return np.concatenate([(w - g).ravel() for w, g in zip(weights, glob, strict=True)]), n, metrics


def test_update_level_mods_apply_under_secagg():
    plain_delta, n, metrics = _fit()
    assert n > 0 and metrics["leakbed-truth-user-id"] == "user1" and "leakbed-truth-has-property" in metrics
    assert not any(isinstance(v, list) for v in metrics.values())  # fit metrics carry scalars only
    selective, _, _ = _fit('defenses=[{name="selective", share=0.1}]')
    assert abs(np.mean(selective != 0) - 0.1) < 0.02 and np.mean(plain_delta != 0) > 0.5  # measured 0.100 vs 0.618
    noisy, _, _ = _fit('defenses=[{name="noise", variance=0.5}]')
    assert np.linalg.norm(noisy - plain_delta) > 100 * np.linalg.norm(plain_delta)  # measured 107 vs 0.108


def test_the_plain_clientapp_hands_secagg_stages_to_the_secagg_device(monkeypatch):
    seen = []
    monkeypatch.setattr("leakbed.client.secagg.app", lambda msg, ctx: seen.append(msg) or "secagg")
    stage = fake_message(RecordDict({plain.SECAGG_CONFIGS: ConfigRecord({"stage": "setup"})}))
    assert plain.secagg_mod(stage, None, lambda m, c: "plain") == "secagg" and seen == [stage]
    other = fake_message(RecordDict({"config": ConfigRecord({"x": 1})}))
    assert plain.secagg_mod(other, None, lambda m, c: "plain") == "plain" and seen == [stage]


def test_secagg_quantization_is_seeded_by_the_experiment():
    """The reply's stochastic rounding (flwr's quantize, right after fit) repeats for the same seed and
    differs for another: two runs of one config used to differ in every aggregate."""
    from flwr.common.secure_aggregation.quantization import quantize

    from leakbed.client.secagg import seed_quantization

    vec = [np.linspace(-1.0, 1.0, 1001, dtype=np.float32)]
    draws = []
    for seed in (0, 0, 1):
        np.random.seed(12345 + len(draws))  # whatever state the process was in
        seed_quantization(seed, 3, 1)
        draws.append(quantize(vec, 8.0, 1 << 10)[0])
    assert np.array_equal(draws[0], draws[1]) and not np.array_equal(draws[0], draws[2])
    delta_a, _, _ = _fit()
    first = quantize([delta_a], 8.0, 1 << 22)[0]
    delta_b, _, _ = _fit()
    assert np.array_equal(first, quantize([delta_b], 8.0, 1 << 22)[0])  # fit seeds it itself
