"""Deep Leakage from Gradients (Zhu et al., NeurIPS 2019): the pixel-space baseline of seed 004 Table 1.

Threat model: the same as ``attacks.feature_inference`` (an honest-but-curious server holding one
client's single-step gradient g = Δw / η and the global model). DLG optimises dummy images and
dummy soft labels with L-BFGS so that their gradient on every parameter matches g in squared L2
distance; the property is then classified from the reconstructed pixels. It works for a single
sample and collapses as the batch grows (seed 004 §4.1, Fig. 3, Table 1).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from leakbed.attacks.feature_inference import soft_cross_entropy


def dlg_reconstruct(
    model: nn.Module,
    grads: dict[str, np.ndarray],
    batch_size: int,
    num_classes: int,
    input_shape: tuple[int, ...],
    *,
    steps: int = 15,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Dummy images (clipped to [0, 1]) and their labels whose gradient matches ``grads``.

    ``grads`` maps every trainable parameter name to g; ``steps`` L-BFGS steps of up to 20
    function evaluations each (DLG's 300 iterations at the default 15).
    """
    gen = torch.Generator().manual_seed(seed)
    names = [n for n, _ in model.named_parameters()]
    params = [p for _, p in model.named_parameters()]
    target = [torch.as_tensor(grads[n]).float() for n in names]
    x = torch.rand(batch_size, *input_shape, generator=gen).requires_grad_(True)
    y = torch.randn(batch_size, num_classes, generator=gen).requires_grad_(True)
    opt = torch.optim.LBFGS(
        [x, y], lr=1.0, max_iter=20, history_size=100, line_search_fn="strong_wolfe", tolerance_grad=0.0, tolerance_change=0.0
    )

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = soft_cross_entropy(model(x), torch.softmax(y, 1))
        dummy = torch.autograd.grad(loss, params, create_graph=True)
        dist = sum(((d - t) ** 2).sum() for d, t in zip(dummy, target, strict=True))
        dist.backward()
        return dist

    model.eval()
    for _ in range(steps):
        loss = opt.step(closure)
        if not torch.isfinite(loss):
            break
    with torch.no_grad():
        return torch.nan_to_num(x, nan=0.5).clamp(0.0, 1.0).numpy(), y.argmax(1).numpy()
