"""Invert one FedAvg update (Dimitrov et al. 2022, §4): optimise every epoch's inputs so that the simulated
local training reproduces the tapped Δw, tie the epochs together with a permutation-invariant prior, then
align the epochs' reconstructions and average them.

The device reshuffles its n examples every epoch, so epoch e sees the same set in an unknown order: the
attack keeps one candidate set X_e per epoch (arranged in the order of the simulated batches) and adds the
paper's epoch prior, the distance between the epochs' mean images (a function of a set, blind to its order;
their ``l2_mean``). The matching loss is the paper's exponentially layer-weighted L2 between the simulated and
the tapped update (earlier layers weigh more), here divided by the tapped update's own weighted norm so that
the prior weights do not depend on the update's scale; total variation is the image prior; inputs are kept in
the data range [0, 1]. At the end each epoch's set is matched to the first epoch's by the Hungarian algorithm
on pixel distance and the matched images are averaged (their §4.2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations
from typing import cast

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from torch import nn

from leakbed_fedavg.schedule import Schedule
from leakbed_fedavg.unroll import Tensors, simulated_update


@dataclass(frozen=True)
class Settings:
    """The optimisation's knobs (``FedAvgInversionParams`` holds their defaults, units and bounds)."""

    iterations: int
    step_size: float
    decay: float
    distance: str
    tv_weight: float
    epoch_prior_weight: float
    restarts: int


@dataclass(frozen=True)
class Inversion:
    images: np.ndarray  # (U, C, H, W): the distinct examples, the first epoch's order
    labels: np.ndarray  # (U,): the labels the attack gave them
    loss: float  # final matching loss of the kept restart


def layer_weights(names: list[str]) -> dict[str, float]:
    """exp(−l) for the l-th layer (weight and bias share one): the paper's exponential layer weights."""
    layers: dict[str, int] = {}
    for n in names:
        layers.setdefault(n.rsplit(".", 1)[0], len(layers))
    return {n: float(np.exp(-layers[n.rsplit(".", 1)[0]])) for n in names}


def update_distance(sim: Tensors, target: Tensors, weights: dict[str, float], kind: str) -> torch.Tensor:
    """Weighted L2 over the tapped update's weighted norm, or 1 − weighted cosine similarity."""
    if kind == "cosine":  # (sums over a non-empty update: tensors, never the start value 0)
        dot = cast(torch.Tensor, sum(weights[k] * (sim[k] * target[k]).sum() for k in target))
        ns = cast(torch.Tensor, sum(weights[k] * sim[k].pow(2).sum() for k in target))
        nt = cast(torch.Tensor, sum(weights[k] * target[k].pow(2).sum() for k in target))
        return 1.0 - dot / (ns.sqrt() * nt.sqrt() + 1e-12)
    num = cast(torch.Tensor, sum(weights[k] * (sim[k] - target[k]).pow(2).sum() for k in target))
    den = cast(torch.Tensor, sum(weights[k] * target[k].pow(2).sum() for k in target))
    return num / (den + 1e-12)


def total_variation(x: torch.Tensor) -> torch.Tensor:
    return (x[..., 1:, :] - x[..., :-1, :]).abs().mean() + (x[..., :, 1:] - x[..., :, :-1]).abs().mean()


def epoch_prior(sets: list[torch.Tensor], whole: list[int]) -> torch.Tensor:
    """Mean squared distance between the whole epochs' mean images, over every pair (0 for one epoch)."""
    pairs = list(combinations(whole, 2))
    if not pairs:
        return sets[0].new_zeros(())
    means = {e: sets[e].mean(0) for e in whole}
    return torch.stack([(means[a] - means[b]).pow(2).mean() for a, b in pairs]).mean()


def _batches(sets: list[torch.Tensor], labels: list[torch.Tensor], plan: Schedule) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each simulated step's inputs and labels: consecutive slices of its epoch's candidate set."""
    out, offset = [], [0] * len(sets)
    for e, b in zip(plan.epochs, plan.sizes, strict=True):
        out.append((sets[e][offset[e] : offset[e] + b], labels[e][offset[e] : offset[e] + b]))
        offset[e] += b
    return out


def align_epochs(sets: list[np.ndarray], whole: list[int]) -> np.ndarray:
    """The first epoch's images, each averaged with its Hungarian match (pixel MSE) in every other whole epoch."""
    base = sets[0]
    if len(whole) < 2 or whole[0] != 0:
        return base
    flat0 = base.reshape(len(base), -1)
    acc = base.astype(np.float64).copy()
    for e in whole[1:]:
        other = sets[e].reshape(len(sets[e]), -1)
        cost = ((flat0[:, None, :] - other[None, :, :]) ** 2).mean(-1)
        rows, cols = linear_sum_assignment(cost)
        acc[rows] += sets[e][cols]
    return (acc / len(whole)).astype(np.float32)


def invert(
    model: nn.Module,
    start: Tensors,
    target: Tensors,
    labels: np.ndarray,
    plan: Schedule,
    *,
    lr: float,
    momentum: float,
    settings: Settings,
    seed: int,
    init: Callable[[int], torch.Tensor],
) -> Inversion:
    """Reconstruct the U distinct examples behind ``target`` (Δw) given their estimated ``labels``; ``init(k)``
    gives k starting images on the model's device."""
    device = next(iter(start.values())).device
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(labels), generator=gen)  # which label each candidate slot carries, in every epoch
    y = torch.as_tensor(np.asarray(labels)[order.numpy()], dtype=torch.long, device=device)
    sizes = plan.epoch_sizes
    ys = [y[:n] for n in sizes]
    whole = [e for e, n in enumerate(sizes) if n == plan.examples]
    weights = layer_weights(list(target))
    target = {k: v / lr for k, v in target.items()}
    s = settings
    best: Inversion | None = None
    for _ in range(s.restarts):
        sets = [init(n).requires_grad_(True) for n in sizes]
        opt = torch.optim.Adam(sets, lr=s.step_size)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=s.decay)

        def objective() -> tuple[torch.Tensor, torch.Tensor]:
            sim = simulated_update(model, start, _batches(sets, ys, plan), lr=lr, momentum=momentum)  # noqa: B023
            match = update_distance({k: v / lr for k, v in sim.items()}, target, weights, s.distance)
            prior = s.tv_weight * sum(total_variation(x) for x in sets) / len(sets)  # noqa: B023
            return match, match + prior + s.epoch_prior_weight * epoch_prior(sets, whole)  # noqa: B023

        for _ in range(s.iterations):
            opt.zero_grad()
            objective()[1].backward()
            opt.step()
            sched.step()
            with torch.no_grad():
                for x in sets:
                    x.clamp_(0.0, 1.0)
        with torch.no_grad():
            final = float(objective()[0])
        if best is None or final < best.loss:
            images = align_epochs([x.detach().cpu().numpy() for x in sets], whole)
            best = Inversion(images, ys[0].cpu().numpy(), final)
    assert best is not None
    return best
