"""Label counts of a FedAvg update, estimated at every local step (Dimitrov et al. 2022, §4.3).

FedSGD label attacks read a batch's labels from the output-bias gradient, (1/B)·Σ_i (p_i − y_i), with p̄ the
model's mean softmax (iDLG; Geng et al. 2021). Under FedAvg the device's Δw sums such gradients over T steps
taken at models the server never sees, with weights w_t (1 for SGD; (1 − μ^(T−t)) / (1 − μ) with momentum μ):
Δb / η = Σ_t w_t (p̄_t − ȳ_t). As the paper does, p̄_t is estimated at every step, on a model interpolated
between the round's global model and the device's end point θ_0 − Δw, here on the attacker's own prior images.
Then Σ_t w_t ȳ_t ≈ Σ_t w_t p̄_t − Δb / η, and every example weighs about the same in it, so the U distinct
examples' label counts are that vector rescaled to sum to U.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from leakbed_fedavg.schedule import Schedule
from leakbed_fedavg.unroll import Tensors


def step_weights(steps: int, momentum: float) -> np.ndarray:
    """How much step t's gradient counts in Δw / η: 1 for SGD, the momentum's geometric tail otherwise."""
    if not momentum:
        return np.ones(steps)
    left = steps - np.arange(steps)
    return (1.0 - momentum**left) / (1.0 - momentum)


def mean_softmax_along(model: nn.Module, start: Tensors, delta: Tensors, steps: int, aux: torch.Tensor) -> np.ndarray:
    """p̄_t for t = 0..T−1: the mean softmax on ``aux`` at θ_0 − (t/T)·Δw."""
    buffers = dict(model.named_buffers())
    out = []
    with torch.no_grad():
        for t in range(steps):
            params = {k: start[k] - (t / steps) * delta[k] for k in start}
            logits = functional_call(model, (params, buffers), (aux,))
            out.append(torch.softmax(logits, 1).mean(0).double().numpy())
    return np.stack(out)


def rounded_counts(share: np.ndarray, total: int) -> np.ndarray:
    """Non-negative integer counts summing to ``total``, by largest remainder of ``share`` · total."""
    share = np.clip(np.asarray(share, np.float64), 0.0, None)
    if share.sum() <= 0:
        share = np.ones_like(share)
    est = share / share.sum() * total
    counts: np.ndarray = np.floor(est).astype(np.int64)
    for k in np.argsort(-(est - counts))[: total - int(counts.sum())]:
        counts[k] += 1
    return counts


def estimate_counts(
    model: nn.Module,
    start: Tensors,
    delta: Tensors,
    bias_key: str,
    plan: Schedule,
    *,
    lr: float,
    momentum: float,
    aux: torch.Tensor,
) -> np.ndarray:
    """How many of the U distinct examples hold each class."""
    w = step_weights(plan.steps, momentum)
    p_bar = mean_softmax_along(model, start, delta, plan.steps, aux)
    bias_sum = delta[bias_key].double().numpy() / lr
    return rounded_counts(w @ p_bar - bias_sum, plan.distinct)
