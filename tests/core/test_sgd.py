"""``core.sgd.SGD`` is ``torch.optim.SGD`` bit for bit (so no number of a run moves), without what torch's own costs
each new process: the import of ``torch._dynamo`` on its first use."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

from leakbed.core.sgd import SGD


class _Net(nn.Module):
    """A conv net with one parameter the loss never reaches (no gradient: skipped, no momentum buffer)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 10))
        self.unused = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def _train(make, momentum: float) -> list[torch.Tensor]:  # noqa: ANN001 - an optimizer's constructor
    torch.manual_seed(0)
    net = _Net()
    x, y = torch.randn(48, 1, 8, 8), torch.randint(0, 10, (48,))
    opt = make(net.parameters(), lr=0.1, momentum=momentum)
    for step in range(6):
        opt.zero_grad()
        nn.functional.cross_entropy(net(x[8 * step : 8 * step + 8]), y[8 * step : 8 * step + 8]).backward()
        opt.step()
    return [p.detach().clone() for p in net.parameters()]


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_the_same_parameters_as_torch_sgd_bit_for_bit(momentum: float) -> None:
    ours, torchs = _train(SGD, momentum), _train(torch.optim.SGD, momentum)
    assert all(torch.equal(a, b) for a, b in zip(ours, torchs, strict=True))
    assert not torch.equal(ours[0], _train(SGD, 0.5)[0])  # momentum is used (the comparison can fail)


@pytest.mark.long
def test_a_device_update_loads_no_torch_dynamo() -> None:
    code = (
        "import sys, numpy as np, torch\n"
        "from leakbed.core.data.corpus import UserData\n"
        "from leakbed.core.training import TrainConfig, local_update\n"
        "data = UserData(np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32), np.arange(16) % 2, np.arange(16.0))\n"
        "for optimizer in ('sgd', 'adam'):\n"
        "    local_update(torch.nn.Linear(4, 2), data, 'multiclass', TrainConfig(1, 4, 0.1, optimizer, 0.9),\n"
        "                 seed=0, device=torch.device('cpu'))\n"
        "    print(optimizer, 'torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.stdout.split() == ["sgd", "False", "adam", "True"], out.stdout + out.stderr[-2000:]
