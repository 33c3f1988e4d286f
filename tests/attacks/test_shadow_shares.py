"""Shares of a round's shadow training (``attacks.shadow.share_of``: what each of the pool's shadow lanes trains): the
shares partition the known users, balanced by size, and merged they give the whole set's updates, bit for bit for
the one-user loop and the batched LSTMs, within float tolerance for the batched CNN (a convolution over fewer users
may run another kernel: ``stack_invariant`` says so, and the pool sends such rounds whole to one lane); each share
trains in its chunk's company (``core.batched_training``), without which its padded steps would differ."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from leakbed.attacks.shadow import by_size, shadow_seed, shadow_updates, share_of
from leakbed.core.batched_training import _step_shapes, batched_local_updates, stack_invariant
from leakbed.core.models import build_model
from leakbed.core.records import RoundSnapshot
from leakbed.core.training import TrainConfig, batch_indices
from tests.attacks.test_shadow_batched import SIZES, _setup, _train

CPU = torch.device("cpu")


def merged(knowledge, snap: RoundSnapshot, n: int) -> tuple[list[str], np.ndarray]:  # noqa: ANN001
    """The n shares' updates, in the knowledge's order (as the pool files them)."""
    got: dict[str, np.ndarray] = {}
    for k in range(n):
        labels, vectors = shadow_updates(knowledge, snap, share=(k, n))
        assert labels == [u for u in knowledge.prior if u in labels]  # each share in the knowledge's order
        assert not set(labels) & set(got)
        got.update(zip(labels, vectors, strict=True))
    users = list(knowledge.prior)
    return users, np.stack([got[u] for u in users])


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_shares_partition_the_known_users_balanced_by_size(n: int) -> None:
    knowledge, _ = _setup("cnn")
    shares = [share_of(knowledge, (k, n)) for k in range(n)]
    assert sorted(i for s in shares for i in s) == list(range(len(SIZES)))
    examples = [sum(SIZES[i] for i in s) for s in shares]
    assert max(examples) - min(examples) <= max(SIZES)  # every n-th user by size: no share holds the big ones
    assert sorted(by_size(knowledge)[:n]) == sorted(max(s, key=SIZES.__getitem__) for s in shares)  # one each


@pytest.mark.parametrize("share", [(1, 1), (-1, 2), (0, 0), (6, 7)])
def test_a_share_that_is_none_is_refused(share: tuple[int, int]) -> None:
    knowledge, _ = _setup("cnn")  # 6 known users: a 7th share would hold none
    with pytest.raises(ValueError, match="share"):
        share_of(knowledge, share)


CASES = [("lstm-lm", 64, True), ("lstm-classifier", 64, True), ("cnn", 0, True), ("cnn", 64, False)]


@pytest.mark.parametrize(("name", "invariant"), [("lstm-lm", True), ("lstm-classifier", True), ("cnn", False),
                                                 ("mobilenet_v3_small", False), ("resnet18", False)])
def test_only_models_without_convolutions_are_stack_invariant(name: str, invariant: bool) -> None:
    """What the pool's caller reads to share rounds (elsewhere rounds go whole to one lane)."""
    knowledge, _ = _setup(name)
    assert stack_invariant(build_model(knowledge.model, knowledge.corpus_meta)) is invariant


@pytest.mark.parametrize(("name", "batch_users", "exact"), CASES, ids=["lstm-lm", "lstm-classifier", "cnn-loop", "cnn-batched"])
@pytest.mark.parametrize("training", [("sgd", 0.1, 0.9, 0), ("adam", 1e-3, 0.0, 3)], ids=["sgd", "adam-steps3"])
def test_merged_shares_equal_the_whole_set(name: str, batch_users: int, exact: bool, training: tuple) -> None:
    """Ragged users (different step counts and last batches, one without prior data), 2 and 3 shares."""
    torch.set_num_threads(1)  # as the lanes run
    knowledge, arrays = _setup(name, batch_users=batch_users)
    snap = RoundSnapshot(4, arrays, _train(*training))
    labels, whole = shadow_updates(knowledge, snap)
    for n in (2, 3):
        users, got = merged(knowledge, snap, n)
        assert users == labels
        if exact:
            assert np.array_equal(got, whole), float(np.abs(got - whole).max())
        else:  # L2-normalised Δw: the last bits of a few users
            np.testing.assert_allclose(got, whole, rtol=0, atol=1e-6)


def test_a_share_trains_in_its_chunks_company() -> None:
    """Without the company a share's steps are padded to its own users' batches (shapes the whole chunk's steps do not
    have), which on most CPUs' kernels gives other bits. With it, the whole chunk's shapes, so the whole chunk's bits
    (the LSTM classifier). Where this CPU's kernels give a user's slice the same bits at any padded shape (measured on
    an AVX-512 Xeon), the shapes still differ and the company's bits are still the chunk's."""
    torch.set_num_threads(1)
    knowledge, arrays = _setup("lstm-classifier")
    cfg = TrainConfig.from_config(_train("sgd", 0.1, 0.9, 0))
    model = build_model(knowledge.model, knowledge.corpus_meta)
    users = list(knowledge.prior)
    seeds = [shadow_seed(knowledge, 1, u) for u in users]
    data = [knowledge.prior[u] for u in users]
    kw = {"device": CPU, "keys": knowledge.keys}
    whole = batched_local_updates(model, arrays, data, "multiclass", cfg, seeds=seeds, **kw)
    part = [0, 5]  # 7 and 6 examples: alone, their short batches are padded to their own sizes, not the chunk's
    company = [(len(d), s) for d, s in zip(data, seeds, strict=True)]
    mine = {"seeds": [seeds[i] for i in part], **kw}
    alone = batched_local_updates(model, arrays, [data[i] for i in part], "multiclass", cfg, **mine)
    joined = batched_local_updates(model, arrays, [data[i] for i in part], "multiclass", cfg, company=company, **mine)
    for key in knowledge.keys:
        assert torch.equal(joined[key], whole[key][part])
    steps = [[len(i) for i in batch_indices(len(data[u]), cfg, seeds[u])] for u in part]
    assert _step_shapes(steps) != _step_shapes([[len(i) for i in batch_indices(n, cfg, s)] for n, s in company])
    if shape_dependent_bits():  # then the padding shows in the bits: without the company, other bits
        assert not all(torch.equal(alone[key], whole[key][part]) for key in knowledge.keys)
    with pytest.raises(ValueError, match="company"):
        batched_local_updates(model, arrays, data[:2], "multiclass", cfg, seeds=seeds[:2], company=company[2:], **kw)


def shape_dependent_bits() -> bool:
    """Whether this CPU's matmul gives a row other bits when the rows beside it change in number (the padded shapes of
    a share's steps): the same 7 rows, alone and in a stack of 16."""
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(16, 300, generator=gen), torch.randn(300, 257, generator=gen)
    return not torch.equal((x[:7] @ w), (x @ w)[:7])
