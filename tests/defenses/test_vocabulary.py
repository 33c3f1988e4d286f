"""Vocabulary restriction (seed 002 §7.3.2): a device's update touches only the k most frequent
tokens' rows, exactly; its training data maps the other tokens to <unk>."""

import json

import numpy as np
import pytest
import torch

from leakbed.client.app import app
from leakbed.core.data import UserData, federation
from leakbed.core.data.corpus import Corpus
from leakbed.core.models import build_model
from leakbed.defenses.vocabulary import allowed_tokens, restrict_data, restrict_update
from leakbed.preflight import preflight
from tests.client.test_client_app import _context, _train_message, handler
from tests.conftest import tiny_config

WORDS = "the cat sat on the mat and the dog sat on a log while a bird sang in the tree by the river bank"


def test_allowed_are_the_specials_and_the_k_most_frequent():
    vocab = ("<pad>", "<unk>", "a", "b", "c", "d")
    x = np.array([[2, 2, 2, 3, 3, 4], [5, 2, 3, 0, 0, 1]])
    corpus = Corpus("t", "multiclass", 2, (6,), {"u": UserData(x, np.zeros(2, np.int64), np.zeros(2))}, vocab)
    assert allowed_tokens(corpus, 2).tolist() == [True, True, True, True, False, False]
    assert allowed_tokens(corpus, 0).all() and allowed_tokens(corpus, 10).all()


def test_restricted_data_and_update():
    allowed = np.array([True, True, True, False, False])
    data = UserData(np.array([[2, 3, 4, 0]]), np.array([[3, 4, 2, 0]]), np.zeros(1))
    out = restrict_data(data, allowed, unk=1, next_token=True)
    assert out.x.tolist() == [[2, 1, 1, 0]] and out.y.tolist() == [[1, 1, 2, 0]]
    glob = {"emb": np.zeros((5, 3), np.float32), "bias": np.zeros(5, np.float32), "other": np.zeros((3, 5), np.float32)}
    local = {k: np.ones_like(v) for k, v in glob.items()}
    sent = restrict_update(glob, local, allowed)
    assert sent["emb"][allowed].min() == 1 and not sent["emb"][~allowed].any() and not sent["bias"][~allowed].any()
    assert (sent["other"] == 1).all()  # not indexed by the vocabulary


@pytest.fixture(scope="module")
def text_cfg(tmp_path_factory):
    root = tmp_path_factory.mktemp("text")
    rng = np.random.default_rng(0)
    words = WORDS.split()
    rows = [{"user_id": f"u{u}", "text": " ".join(rng.choice(words, size=40))} for u in range(4) for _ in range(12)]
    path = root / "posts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = ["data.source='table'", f"data.path='{path}'", "data.seq_len=8", "data.vocab_size=30", "data.min_examples=4"]
    return lambda *more: tiny_config(*base, *more)


def test_a_vocab_device_sends_zero_change_outside_the_allowed_rows(text_cfg):
    cfg = text_cfg('defenses=[{name="vocab", tokens=4, users=["u1"]}]')
    fed = federation(cfg, "random")
    torch.manual_seed(0)
    model = build_model(cfg.model, fed.corpus)
    allowed = allowed_tokens(fed.corpus, 4)
    assert allowed.sum() == 6 and len(allowed) == len(fed.corpus.vocab)
    glob = {k: v.numpy() for k, v in model.state_dict().items()}
    pid = fed.user_ids.index("u1")
    sent = {k: v.numpy() for k, v in app(_train_message(cfg, model), _context(pid)).content["arrays"].items()}
    vocab_keys = [k for k, v in glob.items() if v.shape[0] == len(allowed)]
    assert vocab_keys == ["embedding.weight", "fc.weight", "fc.bias"]
    for k in vocab_keys:
        delta = sent[k] - glob[k]
        assert not delta[~allowed].any(), k  # exactly zero
        assert np.abs(delta[allowed]).max() > 0, k
    plain = handler(_train_message(text_cfg(), model), _context(pid)).content["arrays"]
    assert np.abs(plain["fc.weight"].numpy() - glob["fc.weight"])[~allowed].max() > 0  # without the defense they move
    other = fed.user_ids.index("u2")
    a = app(_train_message(cfg, model), _context(other)).content["arrays"]
    b = handler(_train_message(text_cfg(), model), _context(other)).content["arrays"]
    assert all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in glob)  # non-adopters are untouched


def test_vocab_needs_token_data():
    with pytest.raises(ValueError, match="defenses.0: vocab needs token data"):
        preflight(tiny_config('defenses=[{name="vocab", tokens=100}]'))
    with pytest.raises(ValueError, match=r"defenses.0 \(vocab\).tokens"):
        preflight(tiny_config('defenses=[{name="vocab", tokens=2.5}]'))
