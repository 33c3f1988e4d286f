"""Metadata re-identification (suite name ``metadata``): which known user sent an anonymous update,
read from what the report carries besides its weights, alone and fused with the weight attackers.

Seed 001 §3 assumes a shuffler that strips metadata and leaves "only the parameter updates"; but a
FedAvg report must still carry its example count n_k (the server weights by it), and the weights it
carries have a norm, a share of zeros and a size. This attack measures what they give away.

Threat model: the honest-but-curious server (seed 001 §4.1). It receives, per anonymous update, its
opaque id, (release) round, the attack layers' normalised Δw, n_k, and the norm, sparsity and byte
size of the whole Δw (``core.records.AnonymousUpdate``); its own prior data per known user; and
the closed-world attackers' scores (``attacks.reidentify``) on the same updates. Never a node id,
arrival order or truth.

What the attacker assumes, and why it is fair: its prior of each user is a roughly constant share
of that user's data (a random or chronological prior of ``split.prior_fraction``: a curious service
that holds a share of each user's photos or texts), so the user's device count is proportional to
its prior size, n_u ≈ s·|prior_u|. It does not know s (it is never given the split recipe): it
estimates s by matching the medians of the anonymous counts and of its prior sizes (sampling is
uniform over users, so the counts of the stream are a sample of the devices' sizes). With a fixed
``split.prior_count`` the prior sizes say nothing and the size model is flat (at chance). It also
adapts to how counts are reported: exact, bucketed to powers of two (``count-bucket``: it predicts
the bucket), or constant (``count-constant``: counts carry nothing). The Δw norm grows with the
number of local steps, hence with n; per round it fits log‖Δw‖ = a + b·log n_k on the anonymous
stream itself and scores each user by how well its predicted n_u explains the norm (needs counts
that vary; with constant counts, or norms clipped to one value, the norm model is flat). Sparsity
and byte size have no model from the prior here (they are used by ``attacks.linkage``).

Scores: ``meta`` is the metadata log-likelihood per (update, user); ``fused_<attacker>`` adds it to
the attacker's log-posterior (kNN/MLP probabilities smoothed towards uniform, SVM margins through a
softmax): the naive-Bayes product of two independent views. An attacker with no signal ranks at
random (seeded tie-breaking), so it sits at chance rather than below it.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from scipy.special import log_softmax, ndtr

from leakbed.attacks.contract import Attack, AttackContext, Outputs, Scores
from leakbed.attacks.registry import params_of, reid_attack
from leakbed.core.rankings import tie_break

NAME = "metadata"
SIGMA_FLOOR = 0.005  # log-count spread below which two counts are the same report


def report_rule(counts: np.ndarray) -> str:
    """How counts are reported, read off the stream: ``constant``, ``pow2`` (bucketed) or ``exact``."""
    counts = np.asarray(counts, np.int64)
    if len(np.unique(counts)) <= 1:
        return "constant"
    if len(counts) >= 8 and np.all((counts > 0) & ((counts & (counts - 1)) == 0)):
        return "pow2"
    return "exact"


def size_scale(prior_sizes: np.ndarray, counts: np.ndarray) -> float:
    """s in n_u ≈ s·|prior_u|: started at the ratio of the median anonymous count to the median prior size, then
    refined to the s under which the stream's counts sit closest to some user's predicted count (a grid
    over ±50% in log scale; every count comes from some known user)."""
    logc = np.log(np.maximum(counts, 1)).astype(np.float64)
    logp = np.log(np.maximum(prior_sizes, 1)).astype(np.float64)
    start = float(np.median(logc) - np.median(logp))
    grid = start + np.linspace(-0.7, 0.7, 561)
    uniq = np.unique(logc)
    cost = [np.abs(uniq[:, None] - (g + logp)[None, :]).min(axis=1).mean() for g in grid]
    return float(np.exp(grid[int(np.argmin(cost))]))


def count_loglik(counts: np.ndarray, prior_sizes: np.ndarray, rule: str) -> tuple[np.ndarray, dict]:
    """log P(reported count | user) for every (update, user), and the fitted model's parameters."""
    n, u = len(counts), len(prior_sizes)
    if rule == "constant" or n == 0 or len(np.unique(prior_sizes)) <= 1:
        return np.zeros((n, u)), {"scale": float("nan"), "sigma": float("nan")}
    s = size_scale(prior_sizes, counts)
    pred = np.log(s * np.maximum(prior_sizes, 1))  # log n_u
    x = np.log(np.maximum(counts, 1))[:, None]
    if rule == "pow2":  # the bucket of round(log2 n): its mass under log n ~ N(pred, sigma)
        resid = np.abs(x - pred[None, :]).min(axis=1)
        sigma = np.sqrt(max(1.4826 * float(np.median(resid)), SIGMA_FLOOR) ** 2 + (1.0 / np.maximum(prior_sizes, 1)) ** 2)
        half = np.log(2) / 2
        lo, hi = (x - half - pred[None, :]) / sigma[None, :], (x + half - pred[None, :]) / sigma[None, :]
        return np.log(np.maximum(ndtr(hi) - ndtr(lo), 1e-300)), {"scale": s, "sigma": float(np.median(sigma))}
    resid = np.abs(x - pred[None, :]).min(axis=1)
    sigma = np.sqrt(max(1.4826 * float(np.median(resid)), SIGMA_FLOOR) ** 2 + (1.0 / np.maximum(prior_sizes, 1)) ** 2)
    z = (x - pred[None, :]) / sigma[None, :]
    return -0.5 * z**2 - np.log(sigma)[None, :], {"scale": s, "sigma": float(np.median(sigma))}


def norm_loglik(
    norms: np.ndarray, counts: np.ndarray, rounds: np.ndarray, prior_sizes: np.ndarray, scale: float
) -> tuple[np.ndarray, float]:
    """log P(‖Δw‖ | user): per round, log‖Δw‖ regressed on log n_k over the stream, evaluated at each user's
    predicted size; flat where counts or norms do not vary. Returns it and the mean slope b."""
    out = np.zeros((len(norms), len(prior_sizes)))
    if not np.isfinite(scale) or not np.isfinite(norms).all() or (norms <= 0).any():
        return out, float("nan")
    slopes = []
    log_pred = np.log(scale * np.maximum(prior_sizes, 1))
    for rnd in np.unique(rounds):
        sel = rounds == rnd
        x, y = np.log(np.maximum(counts[sel], 1)), np.log(norms[sel])
        if sel.sum() < 4 or np.ptp(x) == 0 or np.ptp(y) < 1e-9:
            continue
        b, a = np.polyfit(x, y, 1)
        sd = max(float(np.std(y - (a + b * x), ddof=2)), 1e-6)
        z = (y[:, None] - (a + b * log_pred)[None, :]) / sd
        out[sel] = -0.5 * z**2
        slopes.append(b)
    return out, float(np.mean(slopes)) if slopes else float("nan")


def weight_logpost(score_kind: str, scores: np.ndarray) -> np.ndarray:
    """An attacker's scores as a log-posterior over users: probabilities smoothed towards uniform, margins softmaxed."""
    if score_kind == "margin":
        return log_softmax(scores, axis=1)
    u = scores.shape[1]
    return np.log(0.9 * scores + 0.1 / u)


def reid_scores(ctx: AttackContext, name: str, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray) -> Scores:
    """leakbed's own closed-world re-identification attack ``name`` (built-in: its code may run in this sandbox; a
    plugin's never does), with the run's parameters of it, trained and applied here."""
    params = params_of(name, ctx.peers[name].get("params"))
    return reid_attack(name).classify(params, ctx.seed, x_train, y_train, x_test)


def weight_scores(ctx: AttackContext, name: str, ids: np.ndarray, users: list[str]) -> np.ndarray | None:
    """The closed-world attacker's scores on ``ids`` in ``users`` order: its outputs (handed over read-only once
    written) when they cover exactly these updates, else, for one of leakbed's own attackers, fitted here the
    same way; None for a plugin's attacker without outputs (its code never runs in another attack's sandbox)."""
    pred = ctx.read_upstream(name)
    if pred is None or "ids" not in pred or not np.array_equal(pred["ids"], ids):
        if not ctx.peers.get(name, {}).get("builtin"):
            return None
        x_train, y_train, _ = ctx.store.read_shadow()
        fit = reid_scores(ctx, name, x_train, y_train, ctx.store.read_anon()["vectors"])
        pred = {"classes": fit.classes, "scores": fit.scores}
    col = {str(c): j for j, c in enumerate(pred["classes"])}
    out = np.full((len(ids), len(users)), np.nan)
    for k, u in enumerate(users):
        if u in col:
            out[:, k] = pred["scores"][:, col[u]]
    fill = np.nanmin(out) if np.isfinite(out).any() else 0.0
    return np.where(np.isfinite(out), out, fill)


def metadata_scores(ctx: AttackContext) -> Outputs:
    store, knowledge = ctx.store, ctx.knowledge
    anon = store.read_anon()
    meta = store.read_anon_meta()
    users = list(knowledge.prior)
    sizes = np.asarray([len(knowledge.prior[u]) for u in users], np.float64)
    counts = np.asarray(anon["num_examples"], np.int64)
    rounds = np.asarray(anon["round"], np.int64)
    rule = report_rule(counts)
    ll_count, params = count_loglik(counts, sizes, rule)
    ll_norm, slope = (
        norm_loglik(meta["norm"], counts, rounds, sizes, params["scale"])
        if rule != "constant"
        else (np.zeros_like(ll_count), float("nan"))
    )
    meta_ll = log_softmax(ll_count + ll_norm, axis=1) if len(users) else ll_count
    out: dict[str, np.ndarray] = {
        "ids": anon["ids"],
        "rounds": rounds,
        "classes": np.asarray(users),
        "meta": tie_break(meta_ll, knowledge.seed).astype(np.float64),
        "count_only": tie_break(log_softmax(ll_count, axis=1), knowledge.seed).astype(np.float64),
        "rule": np.asarray(rule),
        "scale": np.asarray(params["scale"]),
        "sigma": np.asarray(params["sigma"]),
        "norm_slope": np.asarray(slope),
    }
    for name in ctx.upstream:  # the suite's closed-world attackers (builds_on = family:reid), in suite order
        raw = weight_scores(ctx, name, anon["ids"], users)
        if raw is None:
            continue
        logpost = weight_logpost(ctx.peers[name].get("score_kind", "probability"), raw)
        out[f"weights_{name}"] = raw  # as the attacker ranks them (its closed-world scores on these updates)
        out[f"fused_{name}"] = tie_break(logpost + meta_ll, knowledge.seed)
    return out


class Metadata(Attack):
    name: ClassVar[str] = NAME
    source = "issue 12 (leakbed): seed 001 §3's shuffler assumption tested against FedAvg's example counts"
    threat = (
        "the honest-but-curious server: per anonymous update its opaque id, (release) round, the attack layers' "
        "normalised Δw, n_k and the norm, sparsity and size of the whole Δw; its prior data per known user; the "
        "closed-world attackers' scores on the same updates; never a node id, arrival order or truth"
    )
    scorer = "metadata"
    builds_on = ("family:reid",)

    def predict(self, ctx: AttackContext) -> Outputs:
        return metadata_scores(ctx)
