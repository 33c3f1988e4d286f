"""Re-identification from raw data vs from updates (seed 000 §6.1.7, Figure 10): three attackers
that all predict the user, from (a) one anonymous update (the run's attacker on its store), (b) one
raw private image (the run's model architecture trained on prior images labelled by user), and
(c) a set of s private images (the mean of (b)'s last hidden features over the set, classified by
(b)'s final layer). Raw-data attacks are hypothetical: the server never sees images. (a) is the run's attack,
re-fitted in the sandbox (``studies.reattack``); (b) and (c) are this study's own data-space reference, not an
attack of the run, computed here from the devices' images the referee side holds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from leakbed.core.data.corpus import Corpus
from leakbed.core.errors import LeakbedError
from leakbed.core.models import build_model, final_linear
from leakbed.core.multitask import _with_hidden
from leakbed.core.reid_metrics import reid_metrics
from leakbed.core.tables import markdown_table
from leakbed.studies.plots import pct, plt, write
from leakbed.studies.run_view import RunView


def _user_classifier(view: RunView, epochs: int) -> tuple[nn.Module, list[str]]:
    """The run's architecture with one output per user, trained (Adam 1e-3) on the prior images."""
    users = view.fed.user_ids
    corpus = view.fed.corpus
    torch.manual_seed(view.cfg.seed)
    model = build_model(view.cfg.model, Corpus(corpus.name, "multiclass", len(users), corpus.input_shape, {}))
    x = torch.from_numpy(np.concatenate([view.fed.splits[u].prior.x for u in users]))
    y = torch.from_numpy(np.concatenate([np.full(len(view.fed.splits[u].prior), i) for i, u in enumerate(users)]))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(view.cfg.seed)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=gen)
        for s in range(0, len(x), 32):
            idx = order[s : s + 32]
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    return model.eval(), users


def run(view: RunView, out: Path, set_sizes: list[int] | None = None, epochs: int = 20) -> dict:
    if len(view.fed.corpus.input_shape) != 3:
        raise LeakbedError("raw-vs-update compares images; this run's data is not images")
    ax, owners, _ = view.anon()
    sx, sy, _ = view.store.read_shadow()
    attack = view.reattack("raw-vs-update")
    attack.add("update", sx, sy, ax, owners)
    upd = attack.run()["update"].metrics()
    model, users = _user_classifier(view, epochs)
    head = dict(model.named_modules())[final_linear(model)]
    classes = np.asarray(users)
    feats, img_owner = [], []
    with torch.no_grad():
        for u in users:
            x = torch.from_numpy(view.fed.splits[u].private.x)
            _, hidden = _with_hidden(model, x)
            feats.append(hidden.numpy())
            img_owner += [u] * len(x)
    allf = np.concatenate(feats)
    with torch.no_grad():
        img_scores = torch.softmax(head(torch.from_numpy(allf)), 1).numpy()
    img = reid_metrics(np.asarray(img_owner), classes, img_scores)
    rows = [["(a) one anonymous update", pct(upd["ap"], upd["chance_ap"]), f"{100 * upd['top1']:.1f}", str(len(owners))],
            ["(b) one raw image", pct(img["ap"], img["chance_ap"]), f"{100 * img['top1']:.1f}", str(len(img_owner))]]  # fmt: skip
    result = {"update": upd, "image": img, "image_sets": {}}
    rng = np.random.default_rng([view.cfg.seed, 0x0E])
    for s in set_sizes or [2, 4, 8, 16]:
        set_feats, set_owner = [], []
        for u, f in zip(users, feats, strict=True):
            if len(f) < s:
                continue
            for _ in range(max(1, len(f) // s)):
                set_feats.append(f[rng.choice(len(f), s, replace=False)].mean(0))
                set_owner.append(u)
        if not set_feats:
            continue
        with torch.no_grad():
            sc = torch.softmax(head(torch.from_numpy(np.stack(set_feats))), 1).numpy()
        m = reid_metrics(np.asarray(set_owner), classes, sc)
        result["image_sets"][str(s)] = m
        rows.append([f"(c) a set of {s} raw images", pct(m["ap"], m["chance_ap"]), f"{100 * m['top1']:.1f}", str(len(set_owner))])
    fig, axis = plt.subplots(figsize=(5, 3.5))
    sizes = [int(s) for s in result["image_sets"]]
    axis.plot(sizes, [result["image_sets"][str(s)]["x_chance"] for s in sizes], "go-", label="image set")
    axis.axhline(upd["x_chance"], color="b", ls="--", label="one update")
    axis.axhline(img["x_chance"], color="orange", ls="-.", label="one image")
    axis.set_xscale("log", base=2)
    axis.set_xlabel("images per set")
    axis.set_ylabel("AP / chance AP")
    axis.legend()
    intro = (
        "Seed 000 §6.1.7, Figure 10: re-identification AP % (× chance) from (a) one anonymous update (the run's "
        f"{view.attacker} attacker on its store), (b) one raw private image (the run's architecture trained "
        f"{epochs} epochs on the prior images, labelled by user) and (c) sets of private images (mean last hidden features)."
    )
    write(out, "raw_vs_update", "Re-identification from raw data vs from updates (seed 000 §6.1.7)", intro,
          markdown_table(["attack input", "AP % (× chance)", "top-1 %", "test items"], rows), result, fig)  # fmt: skip
    return result
