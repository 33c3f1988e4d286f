"""Re-identification by layer (seed 001 §6.2.2, Figure 9 / Table 5): shadow updates (prior data)
and device updates (private data) are replayed on stored global models with every parameter kept,
and the attacker is trained and tested on each layer's Δw alone (flattened, L2-normalised)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from leakbed.core.tables import markdown_table
from leakbed.studies.plots import pct, plt, write
from leakbed.studies.run_view import RunView, flat


def layer_groups(keys: list[str]) -> dict[str, list[str]]:
    """Parameters grouped by module (``fc1.weight`` + ``fc1.bias`` -> ``fc1``), in model order."""
    groups: dict[str, list[str]] = {}
    for k in keys:
        groups.setdefault(k.rsplit(".", 1)[0], []).append(k)
    return groups


def run(view: RunView, out: Path, every: int = 1) -> dict:
    model = view.model()
    params = [n for n, _ in model.named_parameters()]
    groups = layer_groups(params)
    sizes = {g: int(sum(dict(model.named_parameters())[k].numel() for k in ks)) for g, ks in groups.items()}
    rounds = view.rounds[::every]
    train = {g: [] for g in groups}
    test = {g: [] for g in groups}
    y_train, owners = [], []
    for user, split in view.fed.splits.items():
        for rnd in rounds:
            shadow = view.replay(split.prior, rnd, f"{user}/shadow")
            device = view.replay(split.private, rnd, f"{user}/device")
            for g, ks in groups.items():
                train[g].append(flat(shadow, ks))
                test[g].append(flat(device, ks))
            y_train.append(user)
            owners.append(user)
    result = {"rounds": rounds, "layers": {}}
    rows = []
    attack = view.reattack("layers")
    variants = {g: f"layer{depth}" for depth, g in enumerate(groups, start=1)}
    for g, variant in variants.items():
        attack.add(variant, np.stack(train[g]), np.asarray(y_train), np.stack(test[g]), np.asarray(owners))
    fitted = attack.run()
    for depth, g in enumerate(groups, start=1):
        m = fitted[variants[g]].metrics()
        result["layers"][g] = {"depth": depth, "params": sizes[g], **{k: m[k] for k in ("ap", "chance_ap", "x_chance", "top1")}}
        rows.append([str(depth), g, f"{sizes[g]:,}", pct(m["ap"], m["chance_ap"]), f"{100 * m['top1']:.1f}"])
    fig, axis = plt.subplots(figsize=(6, 3.5))
    lay = result["layers"]
    axis.scatter(
        [v["depth"] for v in lay.values()],
        [v["x_chance"] for v in lay.values()],
        s=[20 + 400 * v["params"] / max(sizes.values()) for v in lay.values()],
        alpha=0.6,
    )
    axis.set_xticks([v["depth"] for v in lay.values()], list(lay), rotation=30)
    axis.set_ylabel("AP / chance AP")
    axis.set_xlabel("layer (bubble size: parameters)")
    intro = (
        f"Seed 001 Figure 9 / Table 5: AP % (× chance) of the {view.attacker} attacker on each layer's Δw "
        f"alone; shadow and device updates replayed for every user on {len(rounds)} stored global models."
    )
    write(out, "layers", "Re-identification by layer (seed 001 Figure 9, Table 5)", intro,
          markdown_table(["depth", "layer", "params", "AP % (× chance)", "top-1 %"], rows), result, fig)  # fmt: skip
    return result
