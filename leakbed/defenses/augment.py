"""Data-level defenses: blend a user's data into the crowd before local training.

Seed 001 §7 (Figure 12): ``bkg-repl`` replaces a fraction α of the user's data with background
examples; ``rand-aug`` adds α·|D_u| random background examples; ``mm-aug`` clusters the background
data into M clusters (k-means on features of the shared model) and each user augments with
α·|D_u| examples from one randomly chosen cluster, so users look like a common mode.
Threat model: the device alone applies them; the curious server sees only the resulting update.
"""

from __future__ import annotations

import zlib
from typing import ClassVar

import numpy as np
import torch
from pydantic import Field

from leakbed.core.data import UserData
from leakbed.core.data.corpus import Corpus
from leakbed.core.models import build_model, final_linear
from leakbed.core.plan import DevicePlan
from leakbed.defenses.background import background_pool
from leakbed.defenses.contract import Defense, DeviceContext, Params

SOURCE = "seed 001 §7, Figure 12"
THREAT = "the curious server: it sees only the update the blended data produces, never the data"


class ReplaceParams(Params):
    alpha: float = Field(0.5, ge=0.0, le=1.0, description="share of the user's examples replaced by background ones α [fraction]")


class AugmentParams(Params):
    alpha: float = Field(0.5, ge=0.0, le=10_000.0, description="background examples added, α·|D_u| [multiple of |D_u|]")


class ModeParams(AugmentParams):
    clusters: int = Field(8, ge=1, le=10_000, description="k-means clusters M of the background data [count]")


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


def shared_features(plan: DevicePlan, corpus: Corpus, x: np.ndarray) -> np.ndarray:
    """Penultimate features of the shared initial model (the round-0 global model every device holds)."""
    torch.manual_seed(plan.seed)
    model = build_model(plan.model, corpus).eval()
    layer = dict(model.named_modules())[final_linear(model)]
    captured: list[torch.Tensor] = []
    hook = layer.register_forward_hook(lambda _m, inp, _out: captured.append(inp[0].detach()))
    with torch.no_grad():
        for i in range(0, len(x), 512):
            model(torch.from_numpy(x[i : i + 512]))
    hook.remove()
    feats = torch.cat(captured).reshape(len(x), -1).numpy()
    return feats


_CLUSTERS: dict[tuple[str, int], np.ndarray] = {}


def clusters(ctx: DeviceContext, m: int) -> np.ndarray:
    """k-means clusters of the background data on the shared initial model's features (cached per process)."""
    key = (ctx.plan.model_dump_json(exclude={"defenses", "adversary"}), m)
    if key not in _CLUSTERS:
        # scikit-learn is imported here, not at the top: a deployment starts a ClientApp process per
        # message and most never cluster; the import costs each of them about 1.5 s of CPU
        from sklearn.cluster import KMeans

        bkg = pool(ctx)
        feats = shared_features(ctx.plan, ctx.federation.corpus, bkg.x)
        _CLUSTERS[key] = KMeans(n_clusters=min(m, len(bkg)), random_state=ctx.plan.seed, n_init=4).fit_predict(feats)
    return _CLUSTERS[key]


def pool(ctx: DeviceContext) -> UserData:
    p = ctx.plan
    return background_pool(p.background, p.data, p.split, p.seed, p.rule)


def rng_of(ctx: DeviceContext) -> np.random.Generator:
    """This user's generator for this defense entry (the same every round: a user blends the same way)."""
    return np.random.default_rng([ctx.plan.seed, ctx.index, zlib.crc32(ctx.user.encode())])


class BackgroundReplacement(Defense):
    name: ClassVar[str] = "bkg-repl"
    params = ReplaceParams
    source = SOURCE
    threat = THREAT

    def data(self, ctx: DeviceContext, params: ReplaceParams, data: UserData) -> UserData:
        return bkg_repl(data, pool(ctx), params.alpha, rng_of(ctx))


class RandomAugmentation(Defense):
    name: ClassVar[str] = "rand-aug"
    params = AugmentParams
    source = SOURCE
    threat = THREAT

    def data(self, ctx: DeviceContext, params: AugmentParams, data: UserData) -> UserData:
        return rand_aug(data, pool(ctx), params.alpha, rng_of(ctx))


class ModeAugmentation(Defense):
    name: ClassVar[str] = "mm-aug"
    params = ModeParams
    source = SOURCE
    threat = THREAT

    def data(self, ctx: DeviceContext, params: ModeParams, data: UserData) -> UserData:
        return mm_aug(data, pool(ctx), clusters(ctx, params.clusters), params.alpha, rng_of(ctx))
