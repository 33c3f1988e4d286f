"""``hide-bias``: the device sends the global value for every parameter whose name ends with ``suffix``.

Source: seed 002 §7.3 (sharing fewer parameters: selective gradient sharing) applied to the parameters that
carry the labels (iDLG §3): the output bias. Those entries of the device's Δw are then exactly zero.

Threat model: the curious server (and any attack reading the update): it no longer sees the bias move. FedAvg
still learns the biases from the devices that do not adopt the defense.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from flwr.clientapp.typing import Mod
from pydantic import Field

from leakbed.plugin import Defense, DeviceContext, Params, reply_mod


class HideBiasParams(Params):
    suffix: str = Field(
        ".bias", min_length=1, max_length=64, description="parameters whose name ends so are not updated [name suffix]"
    )


class HideBias(Defense[HideBiasParams]):
    """An update-level defense: one Flower Mod around the device's train handler."""

    name: ClassVar[str] = "hide-bias"
    source = "seed 002 §7.3 (share fewer parameters), aimed at the labels' carrier (iDLG §3)"
    threat = "the curious server and any reader of the update: the chosen parameters' Δw is exactly zero"

    def mod(self, ctx: DeviceContext, params: HideBiasParams) -> Mod | None:
        def hide(glob: dict[str, np.ndarray], local: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            return {k: glob[k] if k.endswith(params.suffix) else v for k, v in local.items()}

        return reply_mod(hide)
