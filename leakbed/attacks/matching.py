"""Matching attack: were two updates produced by the same user? (seed 001 §4.3, Fig. 3b; seed 003
§6.2 and Table 8.)

A Siamese network: two FC-128 ReLU encoders with shared weights embed Δw_i and Δw_j, an L1
distance layer compares the embeddings and an FC-1 sigmoid layer gives P[i = j]; trained with
binary cross-entropy and RMSprop (lr 1e-3) on balanced pairs of the attacker's shadow updates
(positives: one identity's updates in two different rounds). Because it learns a metric rather
than a user-to-class map it also matches updates of users it has never seen (open world, §6.1.2).
The cross-modal attack reuses the same network with two different encoders (Fig. 3c).

Threat model: the honest-but-curious server with prior data of known users (seed 001 §4.1); it
sees anonymous update vectors and its own labelled shadow updates, never who sent an update. The
attack writes the embedding of every anonymous update and the distance head, so any pair can be
scored; the referee draws the balanced test pairs (chance AP = 0.5) with its ground truth: pairs
of two anonymous updates (linking a device's updates across rounds; these share the device's
fixed local data, so they stay linkable even without user-specific bias) and pairs of an
anonymous update with one of the attacker's shadow updates (linking it to prior knowledge, which
falls to chance on the IID control).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import ClassVar

import numpy as np
import torch
from pydantic import Field
from torch import nn

from leakbed.attacks.contract import Attack, AttackContext, Outputs, Params
from leakbed.core.pairs import balanced_pairs
from leakbed.core.pairs import pair_scores as pair_scores  # re-exported

EMBED = 128  # the seed's FC-128 encoders


class SiameseParams(Params):
    """The Siamese matching network (seed 001 §4.3): FC-128 ReLU twins, L1 distance, FC-1 sigmoid, RMSprop."""

    epochs: int = Field(30, ge=1, le=10_000, description="training epochs [count]")
    pairs: int = Field(4000, ge=16, le=10_000_000, description="balanced training pairs drawn per epoch [pairs]")
    batch_size: int = Field(128, ge=1, le=65_536, description="pairs per optimisation step [pairs]")
    lr: float = Field(1e-3, gt=0.0, le=1.0, description="RMSprop learning rate (seed: 1e-3) [1]")
    eval_pairs: int = Field(10_000, ge=16, le=10_000_000, description="balanced test pairs the referee draws (seed: 10K) [pairs]")
PairDraw = Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray, np.ndarray]]


class Siamese(nn.Module):
    """FC-128 ReLU encoder(s), |e_a − e_b|, FC-1; ``shared`` ties the two encoders (Fig. 3b vs 3c)."""

    def __init__(self, dim_a: int, dim_b: int | None = None, shared: bool = True) -> None:
        super().__init__()
        self.enc_a = nn.Sequential(nn.Linear(dim_a, EMBED), nn.ReLU())
        self.enc_b = self.enc_a if shared else nn.Sequential(nn.Linear(dim_b or dim_a, EMBED), nn.ReLU())
        self.head = nn.Linear(EMBED, 1)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Match logits (the sigmoid is in the loss)."""
        return self.head((self.enc_a(a) - self.enc_b(b)).abs()).squeeze(-1)


def train(
    build: Callable[[], Siamese], xa: np.ndarray, xb: np.ndarray, draw: PairDraw, cfg: SiameseParams, seed: int
) -> Siamese:
    """Build the network and minimise BCE on freshly drawn pairs each epoch with RMSprop (seed 001 §4.3).

    Seeded before the network is built: its initial weights must not depend on what the worker process
    drew before (which tasks it ran depends on how the pool spread them)."""
    torch.manual_seed(seed)
    model = build()
    rng = np.random.default_rng(seed)
    ta, tb = torch.from_numpy(np.asarray(xa, np.float32)), torch.from_numpy(np.asarray(xb, np.float32))
    opt = torch.optim.RMSprop(model.parameters(), lr=cfg.lr)
    loss_fn = nn.BCEWithLogitsLoss()
    model.train()
    for _ in range(cfg.epochs):
        i, j, same = draw(rng)
        order = rng.permutation(len(i))
        for start in range(0, len(order), cfg.batch_size):
            sel = order[start : start + cfg.batch_size]
            opt.zero_grad()
            loss = loss_fn(model(ta[i[sel]], tb[j[sel]]), torch.from_numpy(same[sel]))
            loss.backward()
            opt.step()
    model.eval()
    return model


@torch.no_grad()
def embed(encoder: nn.Module, x: np.ndarray) -> np.ndarray:
    return encoder(torch.from_numpy(np.asarray(x, np.float32))).numpy()


def head_arrays(model: Siamese) -> dict[str, np.ndarray]:
    return {"head_w": model.head.weight.detach().numpy()[0].copy(), "head_b": model.head.bias.detach().numpy().copy()}


def fit_siamese(vectors: np.ndarray, labels: np.ndarray, cfg: SiameseParams, seed: int) -> Siamese:
    """A Siamese network trained on labelled update vectors (identities of shadow updates)."""
    draw = partial(balanced_pairs, labels, cfg.pairs)
    return train(partial(Siamese, vectors.shape[1]), vectors, vectors, draw, cfg, seed)


class Matching(Attack):
    """Closed world: train on every known user's shadow updates, embed every anonymous update."""

    name: ClassVar[str] = "matching"
    params = SiameseParams
    source = "seed 001 §4.3 (Fig. 3b); seed 003 §6.2, Table 8"
    threat = (
        "the honest-but-curious server: anonymous update vectors, and its own shadow updates on its prior data, "
        "labelled by identity; it writes embeddings and the distance head, the referee draws the test pairs"
    )
    scorer = "matching"

    def predict(self, ctx: AttackContext) -> Outputs:
        x_train, y_train, _ = ctx.store.read_shadow()
        anon = ctx.store.read_anon()
        model = fit_siamese(x_train, y_train, ctx.params, ctx.seed)
        return {
            "ids": anon["ids"],
            "rounds": anon["round"],
            "emb": embed(model.enc_a, anon["vectors"]),
            "shadow_emb": embed(model.enc_a, x_train),  # the attacker's own updates, to link anonymous ones to its prior
            "shadow_labels": np.asarray(y_train, dtype=str),
            **head_arrays(model),
        }
