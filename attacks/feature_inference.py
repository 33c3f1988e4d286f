"""Individual property inference in deep-feature space (seed 004, Yang et al., §3.2-3.3).

Threat model: an honest-but-curious server holds one client's update from a single local SGD
step on one mini-batch (so Δw = η·g exactly), the global model that step started from, and
auxiliary data labelled with the property (its prior). It never sees the batch. It reconstructs
the last-layer deep features E(X) of every sample in the batch by matching dummy gradients on the
last conv block f_n and the classifier f_c (Eq. 4-7: λ = 0.1, distance = cosine term + Gaussian-
kernel term with σ² = Var(g), step α = 0.1), then a property classifier trained on auxiliary
features E(Z) (FC 1024-512 with dropout, Adam 1e-4, §4) predicts the property of each sample.
Working in feature space is why accuracy holds as the batch grows, where pixel-space
reconstruction (``attacks.dlg``) collapses (Table 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from leakbed.models import SmallCNN


@dataclass(frozen=True)
class FeatureSplit:
    """A CNN cut as in the seed's Fig. 2: front f_1..f_{n-1}, last conv block f_n, classifier f_c."""

    front: nn.Module
    block: nn.Module
    classifier: nn.Module
    block_keys: list[str]
    classifier_keys: list[str]

    def block_input_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        """Shape of f_n's input (f_{n-1}'s output) for one sample of ``input_shape``."""
        with torch.no_grad():
            return tuple(self.front(torch.zeros(1, *input_shape)).shape[1:])

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """E(X): the flattened output of the last conv block."""
        return torch.flatten(self.block(self.front(x)), 1)


def feature_split(model: nn.Module) -> FeatureSplit:
    """The seed's decomposition for the models this testbed trains with plain conv blocks."""
    if isinstance(model, SmallCNN):
        return FeatureSplit(
            front=model.features[:3],
            block=model.features[3:],
            classifier=nn.Sequential(nn.Flatten(), model.fc1, nn.ReLU(), model.fc2),
            block_keys=["features.3.weight", "features.3.bias"],
            classifier_keys=["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"],
        )
    raise ValueError(f"feature inference supports the cnn model, not {type(model).__name__}")


def soft_cross_entropy(logits: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy against soft labels (the dummy label ỹ is optimised as logits)."""
    return -(soft * torch.log_softmax(logits, dim=1)).sum(1).mean()


def gradient_distance(g: torch.Tensor, g_dummy: torch.Tensor) -> torch.Tensor:
    """Eq. 5: (1 − cos(g, g̃)) + (1 − exp(−‖g − g̃‖² / σ²)), σ² = Var(g)."""
    cos = torch.dot(g, g_dummy) / (g.norm() * g_dummy.norm() + 1e-12)
    var = g.var() + 1e-12
    return (1 - cos) + (1 - torch.exp(-((g - g_dummy) ** 2).sum() / var))


def _flat(tensors: list[torch.Tensor] | tuple[torch.Tensor, ...]) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


def reconstruct_features(
    split: FeatureSplit,
    grads: dict[str, np.ndarray],
    batch_size: int,
    num_classes: int,
    input_shape: tuple[int, ...],
    *,
    steps: int = 300,
    step_size: float = 0.1,
    block_weight: float = 0.1,
    seed: int = 0,
) -> np.ndarray:
    """Reconstruct E(X) for each of the batch's ``batch_size`` samples from its gradient ``g``.

    ``grads`` maps the block's and classifier's parameter names to g (= Δw / η). Returns
    (batch_size, feature_dim) in arbitrary sample order (a gradient is a sum over the batch).
    """
    gen = torch.Generator().manual_seed(seed)
    block_params = [p for p in split.block.parameters()]
    cls_params = [p for p in split.classifier.parameters()]
    g_n = _flat([torch.as_tensor(grads[k]) for k in split.block_keys]).float()
    g_c = _flat([torch.as_tensor(grads[k]) for k in split.classifier_keys]).float()
    x_dummy = torch.rand(batch_size, *split.block_input_shape(input_shape), generator=gen).requires_grad_(True)
    y_dummy = torch.randn(batch_size, num_classes, generator=gen).requires_grad_(True)
    opt = torch.optim.Adam([x_dummy, y_dummy], lr=step_size)
    for _ in range(steps):
        opt.zero_grad()
        loss = soft_cross_entropy(split.classifier(split.block(x_dummy)), torch.softmax(y_dummy, 1))
        dummy = torch.autograd.grad(loss, block_params + cls_params, create_graph=True)
        d_n = gradient_distance(g_n, _flat(dummy[: len(block_params)]))
        d_c = gradient_distance(g_c, _flat(dummy[len(block_params) :]))
        (block_weight * d_n + d_c).backward()
        opt.step()
    with torch.no_grad():
        return torch.flatten(split.block(x_dummy), 1).numpy()


class PropertyNet(nn.Module):
    """The seed's property inference model f_p: FC 1024-512 with dropout, one logit."""

    def __init__(self, dim: int, dropout: float = 0.5) -> None:
        super().__init__()
        # inputs are standardised with the auxiliary data's statistics (deep features are tiny early in training)
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))
        self.net = nn.Sequential(
            nn.Linear(dim, 1024), nn.ReLU(), nn.Dropout(dropout), nn.Linear(1024, 512), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(512, 1),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net((x - self.mean) / self.std).squeeze(1)


def train_property_net(
    x: np.ndarray, labels: np.ndarray, *, epochs: int = 50, lr: float = 1e-4, dropout: float = 0.5, seed: int = 0
) -> PropertyNet:
    """Fit f_p on auxiliary (representation, property) pairs with Adam (seed 004 §4: 1e-4, 50 epochs)."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    net = PropertyNet(x.shape[1], dropout)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    xt = torch.as_tensor(x, dtype=torch.float32)
    yt = torch.as_tensor(labels, dtype=torch.float32)
    net.mean.copy_(xt.mean(0))
    net.std.copy_(xt.std(0) + 1e-6)
    net.train()
    for _ in range(epochs):
        order = torch.randperm(len(xt), generator=gen)
        for start in range(0, len(xt), 64):
            idx = order[start : start + 64]
            opt.zero_grad()
            nn.functional.binary_cross_entropy_with_logits(net(xt[idx]), yt[idx]).backward()
            opt.step()
    return net.eval()


@torch.no_grad()
def predict_property(net: PropertyNet, x: np.ndarray) -> np.ndarray:
    """P(property) per row."""
    return torch.sigmoid(net(torch.as_tensor(x, dtype=torch.float32))).numpy()
