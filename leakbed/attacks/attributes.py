"""Attribute inference, alone and jointly with deanonymization (seed 001 §6.1.3, Table 4, Fig. 3d).

Per-user attributes (e.g. PIPA's age or gender; here any attribute column of the data that is
constant within each user, or named columns, taking a user's majority value) are inferred from
an anonymous update by MLPs with the re-identification architecture (§4.3: FC-128 ReLU, SGD lr
0.01, momentum 0.9). STL: one model per attribute and one for the identity; MTL: the
re-identification model with a second head for the attribute, trained on the sum of both
cross-entropy losses, one joint model per attribute. All are trained on the attacker's shadow
updates, labelled with the identity and the attributes it knows from its prior data.

Threat model: the honest-but-curious server (seed 001 §4.1) knowing its known users' prior data
and so their attributes; it never sees an update's sender or the device's attribute values.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch
from pydantic import Field
from torch import nn

from leakbed.attacks.contract import Attack, AttackContext, Outputs, Params, Setting
from leakbed.core.attack_sets import MAX_VALUES, attribute_columns

HIDDEN = 128


class AttributesParams(Params):
    """Attribute inference alone and jointly with deanonymization (seed 001 §6.1.3, Table 4)."""

    columns: list[str] = Field(
        [],
        max_length=64,
        description="attribute columns to infer; empty = every per-user attribute (constant within each user) with "
        "at most max_values values [names]",
    )
    max_values: int = Field(MAX_VALUES, ge=2, le=1000, description="most distinct values of an inferred attribute [count]")
    epochs: int = Field(100, ge=1, le=100_000, description="training epochs of the STL and MTL models [count]")


class MultiHead(nn.Module):
    """The re-identification MLP's trunk with one softmax head per task (Fig. 3d)."""

    def __init__(self, dim: int, classes: list[int]) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(dim, HIDDEN), nn.ReLU())
        self.heads = nn.ModuleList(nn.Linear(HIDDEN, k) for k in classes)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        h = self.trunk(x)
        return [head(h) for head in self.heads]


def train_heads(x: np.ndarray, targets: list[np.ndarray], epochs: int, seed: int, batch: int = 32) -> MultiHead:
    """Minimise the summed cross-entropy of every head with SGD (lr 0.01, momentum 0.9)."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = MultiHead(x.shape[1], [int(t.max()) + 1 for t in targets])
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    tx = torch.from_numpy(np.asarray(x, np.float32))
    ty = [torch.from_numpy(np.asarray(t, np.int64)) for t in targets]
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for start in range(0, len(order), batch):
            sel = torch.from_numpy(order[start : start + batch])
            opt.zero_grad()
            loss = sum(nn.functional.cross_entropy(out, t[sel]) for out, t in zip(model(tx[sel]), ty, strict=True))
            loss.backward()
            opt.step()
    return model


@torch.no_grad()
def predict_heads(model: MultiHead, x: np.ndarray) -> list[np.ndarray]:
    return [out.argmax(dim=1).numpy() for out in model(torch.from_numpy(np.asarray(x, np.float32)))]


def majority(values: np.ndarray) -> float:
    """The most frequent value (the smallest on ties)."""
    uniq, counts = np.unique(values, return_counts=True)
    return float(uniq[np.argmax(counts)])


class Attributes(Attack):
    name: ClassVar[str] = "attributes"
    params = AttributesParams
    source = "seed 001 §6.1.3, Table 4, Fig. 3d"
    threat = (
        "the honest-but-curious server: anonymous updates and its known users' prior data (so their attributes); it never "
        "sees an update's sender or the device's attribute values"
    )
    scorer = "attributes"

    @classmethod
    def check(cls, params: AttributesParams, setting: Setting) -> str | None:
        try:
            columns = attribute_columns(setting.prior, params.columns, params.max_values)
        except ValueError as err:
            return f"attack.params.attributes.columns: {err}"
        if not columns:
            return (
                f"attack.suite: 'attributes' needs per-user attribute columns (constant within each user, 2 to "
                f"{params.max_values} values; or name them in attack.params.attributes.columns); {setting.source} has none"
            )
        return None

    def predict(self, ctx: AttackContext) -> Outputs:
        cfg, knowledge = ctx.params, ctx.knowledge
        columns = attribute_columns(knowledge.prior, cfg.columns, cfg.max_values)
        if not columns:
            raise ValueError("no per-user attribute column to infer (name one in attack.params.attributes.columns)")
        x, labels, _ = ctx.store.read_shadow()
        anon = ctx.store.read_anon()
        users, id_codes = np.unique(labels, return_inverse=True)
        epochs, seed = cfg.epochs, ctx.seed
        out: dict[str, np.ndarray] = {"ids": anon["ids"], "rounds": anon["round"], "columns": np.asarray(columns, dtype=str)}
        (stl_id,) = predict_heads(train_heads(x, [id_codes], epochs, seed), anon["vectors"])
        out["stl_id"] = users[stl_id].astype(str)
        for k, c in enumerate(columns):
            user_value = {u: majority(knowledge.prior[u].attrs[c]) for u in users}
            values, codes = np.unique([user_value[u] for u in labels], return_inverse=True)
            (stl,) = predict_heads(train_heads(x, [codes], epochs, seed + 1 + k), anon["vectors"])
            mtl_id, mtl = predict_heads(train_heads(x, [id_codes, codes], epochs, seed + 1 + k), anon["vectors"])
            out |= {
                f"values/{c}": values,
                f"stl_attr/{c}": values[stl],
                f"mtl_attr/{c}": values[mtl],
                f"mtl_id/{c}": users[mtl_id].astype(str),
            }
        return out
