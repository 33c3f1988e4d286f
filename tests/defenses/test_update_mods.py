import numpy as np
import torch

from leakbed.client.app import app
from leakbed.core.data import federation
from leakbed.core.models import build_model
from leakbed.defenses.update_mods import largest_mask, noise, selective
from tests.client.test_client_app import _context, _train_message, handler
from tests.conftest import tiny_config

G = {"w": np.zeros((4, 5), np.float32), "steps": np.array(3)}
L = {"w": np.arange(20, dtype=np.float32).reshape(4, 5) - 10, "steps": np.array(3)}


def test_largest_share_mask():
    d = np.array([0.1, -5.0, 0.2, 3.0, -0.3], np.float32)
    assert largest_mask(d, 0.4).tolist() == [False, True, False, True, False]
    assert largest_mask(d, 1.0).all() and not largest_mask(d, 0.0).any()


def test_zero_noise_and_a_full_share_send_the_exact_weights():
    local = {"w": np.random.default_rng(0).normal(size=(3, 3)).astype(np.float32), "steps": np.array(3)}
    glob = {"w": np.full((3, 3), 0.1, np.float32), "steps": np.array(3)}
    out = selective(glob, noise(glob, local, 0.0, np.random.default_rng(0)), 1.0)
    assert np.array_equal(out["w"], local["w"])


def test_noise_has_the_configured_variance_and_skips_integers():
    big_g = {"w": np.zeros((200, 200), np.float32), "steps": np.array(3)}
    out = noise(big_g, dict(big_g), 0.25, np.random.default_rng(1))
    assert abs(out["w"].var() - 0.25) < 0.01 and abs(out["w"].mean()) < 0.01
    assert out["steps"] == 3


def test_selective_sends_only_the_largest_changes():
    out = selective(G, L, 0.1)
    assert (out["w"] != 0).sum() == 2 and set(np.abs(out["w"][out["w"] != 0])) == {10.0, 9.0}


def test_the_client_mod_defends_adopters_only():
    cfg = tiny_config('defenses=[{name="noise", variance=100.0, users=["user2"]}]')
    torch.manual_seed(0)
    model = build_model(cfg.model, federation(cfg, "random").corpus)
    plain_cfg = tiny_config()
    for pid, defended in ((2, True), (3, False)):
        with_mod = app(_train_message(cfg, model), _context(pid))  # the ClientApp with its Mods
        handler_only = handler(_train_message(plain_cfg, model), _context(pid))
        a = with_mod.content.array_records["arrays"].to_torch_state_dict()
        b = handler_only.content.array_records["arrays"].to_torch_state_dict()
        diff = max(float((a[k] - b[k]).abs().max()) for k in a)
        assert (diff > 1.0) == defended, (pid, diff)
