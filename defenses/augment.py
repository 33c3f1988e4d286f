"""Data-level defenses: blend a user's data into the crowd before local training.

Seed 001 §7 (Figure 12): ``bkg-repl`` replaces a fraction α of the user's data with background
examples; ``rand-aug`` adds α·|D_u| random background examples; ``mm-aug`` clusters the background
data into M clusters (k-means on features of the shared model) and each user augments with
α·|D_u| examples from one randomly chosen cluster, so users look like a common mode.
Threat model: the device alone applies them; the curious server sees only the resulting update.
"""

from __future__ import annotations

import functools
import zlib

import numpy as np
import torch

from core.adoption import defenses_of
from core.config import ExperimentConfig
from core.data import Federation, UserData
from core.models import build_model, final_linear
from defenses.background import background_pool

DATA_LEVEL = ("bkg-repl", "rand-aug", "mm-aug")


def _strip(data: UserData) -> UserData:
    return UserData(x=data.x, y=data.y, t=data.t)


def _concat(a: UserData, b: UserData) -> UserData:
    return UserData(x=np.concatenate([a.x, b.x]), y=np.concatenate([a.y, b.y]), t=np.concatenate([a.t, b.t]))


def bkg_repl(data: UserData, bkg: UserData, alpha: float, rng: np.random.Generator) -> UserData:
    """Replace round(α·n) of the user's examples (α ≤ 1) with random background examples."""
    n = len(data)
    k = min(n, round(min(alpha, 1.0) * n))
    out = _strip(data)
    if k == 0:
        return out
    slots = rng.choice(n, size=k, replace=False)
    picks = rng.choice(len(bkg), size=k, replace=k > len(bkg))
    x, y = out.x.copy(), out.y.copy()
    x[slots], y[slots] = bkg.x[picks], bkg.y[picks]
    return UserData(x=x, y=y, t=out.t)


def rand_aug(data: UserData, bkg: UserData, alpha: float, rng: np.random.Generator) -> UserData:
    """Add round(α·n) random background examples."""
    k = round(alpha * len(data))
    if k == 0:
        return _strip(data)
    picks = rng.choice(len(bkg), size=k, replace=k > len(bkg))
    return _concat(_strip(data), bkg.take(picks))


def mm_aug(data: UserData, bkg: UserData, clusters: np.ndarray, alpha: float, rng: np.random.Generator) -> UserData:
    """Add round(α·n) background examples from one cluster chosen at random for this user."""
    k = round(alpha * len(data))
    if k == 0:
        return _strip(data)
    chosen = rng.choice(np.unique(clusters))
    members = np.flatnonzero(clusters == chosen)
    picks = rng.choice(members, size=k, replace=k > len(members))
    return _concat(_strip(data), bkg.take(picks))


def shared_features(cfg: ExperimentConfig, fed: Federation, x: np.ndarray) -> np.ndarray:
    """Penultimate features of the shared initial model (the round-0 global model every device holds)."""
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, fed.corpus).eval()
    layer = dict(model.named_modules())[final_linear(model)]
    captured: list[torch.Tensor] = []
    hook = layer.register_forward_hook(lambda _m, inp, _out: captured.append(inp[0].detach()))
    with torch.no_grad():
        for i in range(0, len(x), 512):
            model(torch.from_numpy(x[i : i + 512]))
    hook.remove()
    feats = torch.cat(captured).reshape(len(x), -1).numpy()
    return feats


@functools.lru_cache(maxsize=4)
def _clusters(cfg_json: str, rule: str, m: int) -> np.ndarray:
    # scikit-learn is imported here, not at the top: a deployment starts a ClientApp process per
    # message and most never cluster; the import costs each of them about 1.5 s of CPU
    from sklearn.cluster import KMeans

    from core.data import federation

    cfg = ExperimentConfig.model_validate_json(cfg_json)
    bkg = background_pool(cfg, rule)
    feats = shared_features(cfg, federation(cfg, rule), bkg.x)
    return KMeans(n_clusters=min(m, len(bkg)), random_state=cfg.seed, n_init=4).fit_predict(feats)


def apply_data_defenses(cfg: ExperimentConfig, fed: Federation, user: str, data: UserData) -> UserData:
    """This user's private data after the data-level defenses it adopts (seeded per user and defense)."""
    for index, defense in defenses_of(cfg, fed.user_ids, user):
        if defense.name not in DATA_LEVEL:
            continue
        rng = np.random.default_rng([cfg.seed, index, zlib.crc32(user.encode())])
        bkg = background_pool(cfg, fed.rule)
        if defense.name == "bkg-repl":
            data = bkg_repl(data, bkg, defense.strength, rng)
        elif defense.name == "rand-aug":
            data = rand_aug(data, bkg, defense.strength, rng)
        else:
            clusters = _clusters(cfg.model_dump_json(), fed.rule, defense.clusters)
            data = mm_aug(data, bkg, clusters, defense.strength, rng)
    return data
