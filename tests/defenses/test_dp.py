"""dp-fedavg and local-dp with Flower's Mods and wrapper: clipping bounds what a device sends, the
server noise is z·clip/m on the average only, and ε falls as the noise grows."""

import math

import numpy as np
import pytest
import torch
from flwr.app import MetricRecord, RecordDict
from flwr.serverapp.strategy import FedAvg
from flwr.supercore.differential_privacy import KEY_CLIPPING_NORM

from leakbed.client.app import app
from leakbed.core.config import ExperimentConfig
from leakbed.core.data import federation
from leakbed.core.models import build_model
from leakbed.core.plan import PLAN_KEY, DevicePlan
from leakbed.core.privacy import gaussian_epsilon, rdp_epsilon
from leakbed.defenses.dp import DPParams, SeededDpFixedClipping, local_dp_mod
from leakbed.preflight import preflight
from leakbed.server_defenses import ServerDefenses
from tests.client.test_client_app import _context, _train_message, handler
from tests.conftest import arrays_of, fake_message, tiny_config


def _model(cfg: ExperimentConfig) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(cfg.model, federation(cfg, "random").corpus)


def _dp_message(cfg, model, clip):
    msg = _train_message(cfg, model)
    msg.content.config_records["config"][KEY_CLIPPING_NORM] = clip  # what the server wrapper injects
    return msg


def _update_norm(reply, model) -> float:
    sent = reply.content.array_records["arrays"].to_torch_state_dict()
    return math.sqrt(sum(float(((sent[k] - v) ** 2).sum()) for k, v in model.state_dict().items()))


def test_dp_fedavg_clipping_bounds_the_update_norm_of_adopters_only():
    cfg = tiny_config('defenses=[{name="dp-fedavg", noise_multiplier=1.0, clip=0.01, users=["user2"]}]')
    model = _model(cfg)
    plain = _update_norm(handler(_train_message(tiny_config(), model), _context(2)), model)
    assert plain > 0.02  # so a clip of 0.01 binds
    clipped = _update_norm(app(_dp_message(cfg, model, 0.01), _context(2)), model)
    assert clipped == pytest.approx(0.01, rel=1e-3)
    other = _update_norm(app(_dp_message(cfg, model, 0.01), _context(3)), model)
    assert other > 0.02  # user3 does not adopt: its device does not clip


def _fake_call_next(local):
    def call_next(msg, context):
        return fake_message(RecordDict({"arrays": arrays_of(local), "metrics": MetricRecord({"num-examples": 1})}))

    return call_next


def test_local_dp_noise_has_std_z_times_clip_and_zero_noise_is_clipping_only():
    glob = {"w": np.zeros((300, 300), np.float32)}
    local = {"w": np.full((300, 300), 0.01, np.float32)}  # norm 3
    msg = fake_message(
        RecordDict({"arrays": arrays_of(glob), "config": _train_message(tiny_config(), _model(tiny_config())).content["config"]})
    )
    clip_only = local_dp_mod(DPParams(noise_multiplier=0.0, clip=1.0))(msg, None, _fake_call_next(local))
    w0 = clip_only.content.array_records["arrays"]["w"].numpy()
    assert np.linalg.norm(w0) == pytest.approx(1.0, rel=1e-4) and np.allclose(w0, w0.flat[0])
    np.random.seed(3)
    noised = local_dp_mod(DPParams(noise_multiplier=0.5, clip=1.0))(msg, None, _fake_call_next(local))
    noise = noised.content.array_records["arrays"]["w"].numpy() - w0
    assert noise.std() == pytest.approx(0.5, rel=0.02) and abs(noise.mean()) < 0.01


def test_local_dp_on_the_device_draws_from_the_plans_noise_secret():
    """The same secret gives the same noise (a run reproduced with its kept secret); another secret, or none (the OS's
    randomness), another: the config alone does not regenerate it."""
    cfg = tiny_config('defenses=[{name="local-dp", noise_multiplier=0.1, clip=0.05}]')
    model = _model(cfg)

    def sent(secret: int | None) -> dict:
        msg = _train_message(cfg, model)
        conf = msg.content.config_records["config"]
        conf[PLAN_KEY] = DevicePlan.model_validate_json(str(conf[PLAN_KEY])).model_copy(
            update={"noise_secret": secret}).model_dump_json()  # fmt: skip
        return app(msg, _context(1)).content.array_records["arrays"].to_torch_state_dict()

    a, b, c, d = sent(2**100 + 7), sent(2**100 + 7), sent(8), sent(None)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a) and not all(torch.equal(a[k], d[k]) for k in a)


def _replies(locals_):
    return [
        fake_message(RecordDict({"arrays": arrays_of(w), "metrics": MetricRecord({"num-examples": 1})}), src=10 + i)
        for i, w in enumerate(locals_)
    ]


def _aggregate(z: float, seed: int = 0, rnd: int = 1) -> np.ndarray:
    rng = np.random.default_rng(0)
    locals_ = [{"w": rng.normal(size=(200, 200)).astype(np.float32)} for _ in range(4)]
    wrapper = SeededDpFixedClipping(FedAvg(), DPParams(noise_multiplier=z, clip=2.0), 4, seed)
    arrays, _ = wrapper.aggregate_train(rnd, _replies(locals_))
    assert wrapper.releases == 1
    return arrays["w"].numpy()


def test_server_noise_multiplier_zero_is_the_plain_average_and_noise_is_z_clip_over_m():
    rng = np.random.default_rng(0)
    mean = np.mean([rng.normal(size=(200, 200)).astype(np.float32) for _ in range(4)], axis=0)
    assert np.allclose(_aggregate(0.0), mean, atol=1e-6)
    noise = _aggregate(2.0) - mean
    assert noise.std() == pytest.approx(2.0 * 2.0 / 4, rel=0.02)
    assert np.array_equal(_aggregate(2.0), _aggregate(2.0)) and not np.array_equal(_aggregate(2.0), _aggregate(2.0, rnd=2))


def test_epsilon_falls_as_noise_grows():
    eps = [rdp_epsilon(z, 6, 24, 8, 1e-5) for z in (0.5, 1.0, 2.0, 4.0)]
    assert all(a > b > 0 for a, b in zip(eps, eps[1:], strict=False))
    assert rdp_epsilon(0.0, 6, 24, 8, 1e-5) is None
    assert rdp_epsilon(1.0, 6, 24, 16, 1e-5) > rdp_epsilon(1.0, 6, 24, 8, 1e-5)  # more releases spend more
    assert gaussian_epsilon(2.0, 1e-5) < gaussian_epsilon(1.0, 1e-5) and gaussian_epsilon(0.0, 1e-5) == math.inf


def test_privacy_summary_has_a_guarantee_only_when_every_device_clips():
    users = [f"user{i}" for i in range(6)]
    full = tiny_config('defenses=[{name="dp-fedavg", noise_multiplier=1.0, clip=0.1}]')
    [row] = ServerDefenses(full).privacy(users, 3, releases=2)
    assert row["defense"] == "dp-fedavg" and list(row)[0] == "defense"
    assert row["epsilon"] == pytest.approx(rdp_epsilon(1.0, 3, 6, 2, 1e-5)) and row["sampled_per_round"] == 3
    half = tiny_config('defenses=[{name="dp-fedavg", noise_multiplier=1.0, clip=0.1, fraction=0.5}]')
    [row] = ServerDefenses(half).privacy(users, 3, releases=2)
    assert row["epsilon"] is None and "not every device" in row["note"]
    assert ServerDefenses(tiny_config('defenses=[{name="noise"}]')).privacy(users, 3, 2) == []  # no accounting


def test_only_dp_fedavg_has_a_server_half():
    inner, users = FedAvg(), [f"user{i}" for i in range(6)]
    plain = ServerDefenses(tiny_config('defenses=[{name="noise"}, {name="local-dp"}]'))
    assert plain.wrap(inner, users, 3) is inner and not plain.uniform_weights
    dp = ServerDefenses(tiny_config('defenses=[{name="dp-fedavg", noise_multiplier=2.0, clip=0.5}]'))
    wrapped = dp.wrap(inner, users, 3)
    assert isinstance(wrapped, SeededDpFixedClipping) and wrapped.strategy is inner and dp.uniform_weights
    assert wrapped.noise_multiplier == 2.0 and wrapped.clipping_norm == 0.5 and wrapped.num_sampled_clients == 3


def test_dp_needs_a_float_only_model_and_no_secure_aggregation():
    with pytest.raises(ValueError, match="integer buffers"):
        preflight(tiny_config('defenses=[{name="local-dp"}]', "model.name=resnet18"))
    # under SecAgg+ only the attacks that read aggregates run (an update-level one is refused before the defenses)
    secagg = ("fl.secure_aggregation='secagg+'", "attack.suite=['aggregate-property']", "data.synthetic.property_rate=0.5")
    with pytest.raises(ValueError, match="SecAgg\\+ workflow does not take"):
        preflight(tiny_config('defenses=[{name="dp-fedavg"}]', *secagg))
    preflight(tiny_config('defenses=[{name="local-dp"}]', *secagg))
    preflight(tiny_config('defenses=[{name="local-dp"}]'))
