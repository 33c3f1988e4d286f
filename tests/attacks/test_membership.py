"""Embedding-layer membership inference (seed 002 §7.1.3, Table 7.2) on real LSTM LM updates."""

import numpy as np
import torch

from leakbed.attacks.gradient_features import embedding_key, embedding_tokens
from leakbed.attacks.membership import is_member, record_tokens
from leakbed.core.data.corpus import UserData
from leakbed.core.models import LSTMLanguageModel
from leakbed.core.training import TrainConfig, local_update, state_arrays

VOCAB, SEQ = 300, 8


def _records(n: int, rng: np.random.Generator) -> np.ndarray:
    """Token windows with a Zipf-like word frequency, as in natural text."""
    p = 1.0 / np.arange(1, VOCAB - 1) ** 1.1
    return rng.choice(np.arange(2, VOCAB), size=(n, SEQ + 1), p=p / p.sum()).astype(np.int64)


def _batch_vocabulary(model: LSTMLanguageModel, windows: np.ndarray) -> np.ndarray:
    before = state_arrays(model)
    data = UserData(windows[:, :-1], windows[:, 1:], np.zeros(len(windows)))
    local_update(model, data, "next-token", TrainConfig(1, len(windows), 0.5, "sgd", 0.0, 1), seed=0, device=torch.device("cpu"))
    after = state_arrays(model)
    delta = {k: before[k] - after[k] for k in before}
    model.load_state_dict({k: torch.from_numpy(v) for k, v in before.items()})
    return embedding_tokens(delta, embedding_key(delta))


def test_recall_is_one_and_precision_falls_with_batch_size():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = LSTMLanguageModel(VOCAB, embed=16, hidden=16)
    outsiders = _records(400, rng)
    precision = {}
    for batch in (1, 4, 16, 32):
        tp = fp = fn = 0
        for _ in range(3):
            members = _records(batch, rng)
            vocab = _batch_vocabulary(model, members)
            # the update's changed rows are exactly the batch's input tokens
            assert set(np.flatnonzero(vocab)) == set(np.unique(members[:, :-1]))
            hits = sum(is_member(r[:-1], vocab) for r in members)
            tp, fn = tp + hits, fn + batch - hits
            fp += sum(is_member(r[:-1], vocab) for r in outsiders[rng.choice(len(outsiders), batch, replace=False)])
        assert fn == 0  # recall is 1 by construction
        precision[batch] = tp / (tp + fp)
    assert precision[1] == 1.0 and precision[4] > 0.9
    assert precision[32] < precision[4] and precision[32] < 0.97  # seed Table 7.2: 0.92 at batch 32


def test_padding_is_not_part_of_a_record():
    assert list(record_tokens(np.array([0, 0, 5, 3, 5]))) == [3, 5]
    vocab = np.zeros(10, bool)
    vocab[[3, 5]] = True
    assert is_member(np.array([0, 5, 3]), vocab) and not is_member(np.array([5, 4]), vocab)
    assert not is_member(np.array([12]), vocab)  # a token outside the vocabulary is never a member


def test_a_padded_windows_last_word_is_only_a_target():
    x, y = np.array([4, 5, 6, 0]), np.array([5, 6, 0, 0])  # "4 5 6" then padding: 6 predicts padding
    assert list(record_tokens(x, y)) == [4, 5]
    vocab = np.zeros(10, bool)
    vocab[[4, 5]] = True
    assert is_member(x, vocab, y) and not is_member(x, vocab)
