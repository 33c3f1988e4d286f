"""Inverting Gradients (Geiping et al., NeurIPS 2020): the "IG" column of seed 004 Table 1 (§4.1, ref. [9]).

Threat model: the same as ``attacks.dlg`` (an honest-but-curious server holding one anonymous
client update read as a gradient g = Δw / (η·S), the global model it started from, the training
config it sent, and auxiliary data). It never sees the batch. The batch's labels are read from the
output bias gradient (``attacks.feature_inference.label_counts``, as Geiping et al. assume known or
iDLG-inferred labels); dummy images x̃ are optimised to minimise

    1 − cos(∇_θ L(x̃, ỹ), g) + tv_weight · TV(x̃)

over all parameters at once, with Adam on the sign of the gradient, a step decayed ×0.1 at 3/8,
5/8 and 7/8 of the iterations, and x̃ boxed into the data range [0, 1] after each step (their §4,
"signed", "boxed"). Geiping et al. run thousands of iterations on ResNets; the default here is a
few hundred on the quick CNN (``attack.inverting_gradients.steps``).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from leakbed.attacks.feature_inference import label_counts


def total_variation(x: torch.Tensor) -> torch.Tensor:
    """Mean absolute difference of neighbouring pixels (anisotropic TV), the image prior of IG."""
    return (x[:, :, 1:, :] - x[:, :, :-1, :]).abs().mean() + (x[:, :, :, 1:] - x[:, :, :, :-1]).abs().mean()


def ig_labels(model: nn.Module, bias_key: str, grads: dict[str, np.ndarray], batch_size: int, aux_x: np.ndarray) -> np.ndarray:
    """The batch's labels from the output bias gradient and the model's mean softmax on auxiliary images."""
    model.eval()
    with torch.no_grad():
        p_bar = torch.softmax(model(torch.as_tensor(aux_x)), 1).mean(0).double().numpy()
    return label_counts(np.asarray(grads[bias_key], np.float64), p_bar, batch_size)


def ig_reconstruct(
    model: nn.Module,
    grads: dict[str, np.ndarray],
    labels: np.ndarray,
    input_shape: tuple[int, ...],
    *,
    steps: int = 300,
    step_size: float = 0.1,
    tv_weight: float = 1e-2,
    restarts: int = 1,
    seed: int = 0,
) -> np.ndarray:
    """Images (len(labels), *input_shape) in [0, 1] whose gradient under ``labels`` points along ``grads``.

    ``grads`` maps every trainable parameter name to g; the run with the lowest final loss of
    ``restarts`` random starts is kept.
    """
    gen = torch.Generator().manual_seed(seed)
    names = [n for n, _ in model.named_parameters()]
    params = [p for _, p in model.named_parameters()]
    target = torch.cat([torch.as_tensor(grads[n]).float().reshape(-1) for n in names])
    y = torch.as_tensor(labels, dtype=torch.long)
    model.eval()
    milestones = [int(steps * f) for f in (3 / 8, 5 / 8, 7 / 8)]

    def loss_of(x: torch.Tensor) -> torch.Tensor:
        loss = nn.functional.cross_entropy(model(x), y)
        dummy = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params, create_graph=True)])
        cos = torch.dot(dummy, target) / (dummy.norm() * target.norm() + 1e-12)
        return 1 - cos + tv_weight * total_variation(x)

    best: tuple[float, torch.Tensor] | None = None
    for _ in range(restarts):
        x = torch.rand(len(labels), *input_shape, generator=gen).requires_grad_(True)
        opt = torch.optim.Adam([x], lr=step_size)
        sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=milestones, gamma=0.1)
        for _ in range(steps):
            opt.zero_grad()
            loss_of(x).backward()
            x.grad.sign_()
            opt.step()
            sched.step()
            with torch.no_grad():
                x.clamp_(0.0, 1.0)
        final = float(loss_of(x).detach())
        if best is None or final < best[0]:
            best = (final, x.detach().clone())
    assert best is not None
    return best[1].numpy()
