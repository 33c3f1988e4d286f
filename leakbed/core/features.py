"""Deep features of the models this testbed trains (seed 004, Fig. 2): a CNN cut into its front f_1..f_{n-1}, its last
conv block f_n and its classifier f_c. Feature inference reconstructs E(X) = f_n(f_{n-1}(X)); the referee computes
the true E(X) of a batch's records at the round's global model with the same cut."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from leakbed.core.models import SmallCNN


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
