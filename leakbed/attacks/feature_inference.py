"""Individual property inference in deep-feature space (seed 004, Yang et al., §3.2-3.3).

Threat model: an honest-but-curious server holds one client's update from a single local SGD
step on one mini-batch (so Δw = η·g exactly), the global model that step started from, and
auxiliary data labelled with the property (its prior). It never sees the batch. It reconstructs
the last-layer deep features E(X) of every sample in the batch by matching dummy gradients on the
last conv block f_n and the classifier f_c (Eq. 4-7: λ = 0.1, distance = cosine term + Gaussian-
kernel term with σ² = Var(g), step α = 0.1), then a property classifier trained on auxiliary
features E(Z) (FC 1024-512 with dropout, Adam 1e-4, §4) predicts the property of each sample.
The seed claims accuracy holds as the batch grows, where pixel-space reconstruction
(``attacks.dlg``) collapses (Table 1). On this testbed's CNN the seed's recipe from random dummies
does not (chance from batch 8 on): the loss, dominated by the cosine of the large fc1 gradient,
does not tell good feature sets from bad ones (both stop at d(g_c, g̃_c) ≈ 1.004, the Gaussian term
saturated), and with fc1's units nearly all always-on or dead, g_c only determines per-class
feature sums. The options of ``reconstruct_features`` (labels from the bias gradient, a closed-form
class-wise start, a small decaying step) recover what g_c does determine; per-sample accuracy is
then bounded by the share of samples whose class is in the batch once, or by class majorities.
Where hidden units switch per sample (the CNN trained on FEMNIST), ``init="per-sample"`` goes
further by alternating least squares on g_c (``per_sample_features``), and ``steps=0`` keeps that
closed form, which the seed's dummy optimisation only degraded there.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from leakbed.core.features import FeatureSplit
from leakbed.core.features import (
    feature_split as feature_split,  # re-exported: the plugin API and the pixel attacks take it from here
)

ALWAYS_ON = 0.99  # a hidden unit active on at least this share of auxiliary images counts as linear [fraction]
FIT_STEPS = 300  # Adam steps that fit x̃ to the analytic features before gradient matching [count]
FIT_STEP_SIZE = 0.01  # their step size [1]
STD_FLOOR = 0.1  # least per-feature scale of f_p's input standardisation, as a share of the mean scale [fraction]
PER_SAMPLE_ITERS = 200  # alternating least-squares sweeps of per_sample_features [count]
PER_SAMPLE_DAMPING = 0.5  # share of each sweep's solution taken [fraction]


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


def infer_labels(split: FeatureSplit, grads: dict[str, np.ndarray], batch_size: int, aux_x: np.ndarray) -> np.ndarray:
    """The batch's labels from the output bias gradient (iDLG, Zhao et al. 2020; Yin et al. 2021).

    Uses only the gradient, the global model and auxiliary data. Returns B sorted class indices
    (``label_counts``)."""
    with torch.no_grad():
        p_bar = torch.softmax(split.classifier(split.features(torch.as_tensor(aux_x))), 1).mean(0).double().numpy()
    return label_counts(np.asarray(grads[split.classifier_keys[-1]], dtype=np.float64), p_bar, batch_size)


def label_counts(bias: np.ndarray, p_bar: np.ndarray, batch_size: int) -> np.ndarray:
    """B sorted class indices read from an output bias gradient ``bias`` and the model's mean softmax
    ``p_bar`` on auxiliary data.

    For mean cross-entropy the output bias gradient is (1/B) Σ_i (p_i − y_i): a class with a
    negative entry is in the batch, and its count is about B·(p̄_c − g_c). Counts are rounded to
    sum to B, each present class at least 1.
    """
    bias = np.asarray(bias, dtype=np.float64)
    est = np.clip(batch_size * (p_bar - bias), 0.0, None)
    est = np.where(bias < 0, np.maximum(est, 1.0), est)
    counts = np.floor(est).astype(int)
    while counts.sum() > batch_size:
        counts[np.argmax(np.where(counts > 0, counts - est, -np.inf))] -= 1
    while counts.sum() < batch_size:
        counts[np.argmax(est - counts)] += 1
    return np.repeat(np.arange(len(bias)), counts)


def _fc_relu_fc(split: FeatureSplit, what: str) -> tuple[nn.Linear, nn.Linear]:
    """The classifier's two linear layers, which the closed forms below are written for."""
    fc1, fc2 = split.classifier[1], split.classifier[3]
    if not isinstance(fc1, nn.Linear) or not isinstance(fc2, nn.Linear):
        raise ValueError(f"{what} needs an FC-ReLU-FC classifier")
    return fc1, fc2


def classwise_features(
    split: FeatureSplit,
    grads: dict[str, np.ndarray],
    classes: np.ndarray,
    aux_x: np.ndarray,
    aux_y: np.ndarray | None = None,
    *,
    iters: int = 10,
    prior_weight: float = 1e-3,
) -> torch.Tensor:
    """Closed-form features from the classifier gradient: each sample gets its class's mean feature.

    f_c = FC→ReLU→FC. On the hidden units active for (almost) every auxiliary image the ReLU is the
    identity, so there g_{fc1} = W2ᵀ Z with Z = (1/B) Σ_i (p_i − y_i) e_iᵀ (C × D, as in R-GAP's
    linear-layer step); least squares gives Z. With E_i = S_{y_i} / n_{y_i} (S_c: class sums),
    B·Z = (Q − I) S, Q[c', c] = mean over class c's samples of p_{ic'}; (Q − I) loses one direction
    when every class is present (its columns sum to 0), which a weak pull (``prior_weight``) of the
    class means towards the auxiliary class means fixes. P = softmax(f_c(E)) is iterated ``iters``
    times. This is all a classifier gradient says once B ≥ C: per-class sums, not which sample of a
    class carries what. Uses only g, the global model, auxiliary data and the inferred labels.
    """
    fc1, fc2 = _fc_relu_fc(split, "the analytic initialisation")
    with torch.no_grad():
        aux_e = split.features(torch.as_tensor(aux_x)).double()
        rate = (fc1(aux_e.float()) > 0).double().mean(0)
    w2 = fc2.weight.detach().double()
    linear = rate >= ALWAYS_ON
    if int(linear.sum()) < w2.shape[0]:  # too few always-on units to solve for Z: take every unit ever active
        linear = rate > 0
    g1 = torch.as_tensor(grads[split.classifier_keys[0]]).double()
    z = torch.linalg.lstsq(w2[:, linear].T, g1[linear]).solution  # (C, D)
    present = np.unique(classes)
    counts = torch.as_tensor([(classes == c).sum() for c in present], dtype=torch.float64)
    prior = torch.stack(
        [
            aux_e[torch.as_tensor(aux_y == c)].mean(0) if aux_y is not None and (aux_y == c).any() else aux_e.mean(0)
            for c in present
        ]
    )
    batch = len(classes)
    member = torch.as_tensor(np.searchsorted(present, classes))
    means = prior.clone()
    for _ in range(iters):
        with torch.no_grad():
            p = torch.softmax(split.classifier(means[member].float()), 1).double()  # (B, C)
        q = torch.stack([p[member == k].mean(0) for k in range(len(present))], 1)  # (C, K)
        a = q.clone()
        a[torch.as_tensor(present), torch.arange(len(present))] -= 1.0
        reg = prior_weight * float((a**2).sum()) / len(present)
        lhs = a.T @ a + reg * torch.eye(len(present), dtype=torch.float64)
        sums = torch.linalg.solve(lhs, a.T @ (batch * z) + reg * counts[:, None] * prior)
        means = (sums / counts[:, None]).clamp_min(0)
    return means[member].float()


def per_sample_features(
    split: FeatureSplit, grads: dict[str, np.ndarray], classes: np.ndarray, start: torch.Tensor, *, iters: int = PER_SAMPLE_ITERS
) -> torch.Tensor:
    """Each sample's own features from the classifier gradient, refined from ``start`` (R-GAP-style).

    With f_c = FC→ReLU→FC and mean cross-entropy, [g_{fc1} | g_{b1}] = Δᵀ [H | 1], where row i of
    Δ is δ_i = m_i ⊙ W2ᵀ(p_i − y_i) / B: sample i's ReLU mask and softmax error, both functions of
    its features h_i. Alternating "compute Δ from H, solve H by least squares, clamp at 0" recovers
    H sample by sample when the δ_i are linearly independent, which needs hidden units that switch
    per sample: with units always on or dead (the synthetic CNN) the δ_i span only the C classes and
    H stays at class-wise sums. Uses only g, the global model and the inferred labels.
    """
    fc1, fc2 = _fc_relu_fc(split, "per-sample features")
    w1, b1, w2, b2 = (p.detach().double() for p in (fc1.weight, fc1.bias, fc2.weight, fc2.bias))
    onehot = nn.functional.one_hot(torch.as_tensor(classes), w2.shape[0]).double()
    g_w1, g_b1 = (torch.as_tensor(grads[k]) for k in split.classifier_keys[:2])
    rhs = torch.cat([g_w1, g_b1[:, None]], 1)
    h = start.detach().double()
    for _ in range(iters):
        pre = h @ w1.T + b1
        err = torch.softmax(torch.relu(pre) @ w2.T + b2, 1) - onehot
        delta = (pre > 0).double() * (err @ w2) / len(classes)  # (B, hidden)
        sol = torch.linalg.lstsq(delta.T, rhs.double()).solution  # rows ≈ [h_i | 1]
        one = sol[:, -1:]
        # the bias column should read 1: where it does not, δ_i's scale is off, and dividing fixes it
        new = torch.where(one > 0.1, sol[:, :-1] / one.clamp_min(0.1), sol[:, :-1]).clamp_min(0)
        h = h + PER_SAMPLE_DAMPING * (new - h)  # undamped, flipping ReLU masks can make the sweep oscillate
    return h.float()


def _fit_block_input(split: FeatureSplit, x0: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """x̃ ≥ 0 near ``x0`` whose f_n(x̃) approximates ``target`` (Adam, FIT_STEPS at FIT_STEP_SIZE)."""
    x = x0.clone().requires_grad_(True)
    opt = torch.optim.Adam([x], lr=FIT_STEP_SIZE)
    for _ in range(FIT_STEPS):
        opt.zero_grad()
        ((torch.flatten(split.block(torch.relu(x)), 1) - target) ** 2).sum().backward()
        opt.step()
    return torch.relu(x).detach()


def _restart(
    split: FeatureSplit,
    g_n: torch.Tensor,
    g_c: torch.Tensor,
    x0: torch.Tensor,
    y0: torch.Tensor,
    *,
    optimise_labels: bool,
    steps: int,
    step_size: float,
    block_weight: float,
    schedule: str,
    nonnegative: bool,
) -> tuple[float, torch.Tensor]:
    """One run of Eq. 6 from (x0, y0): returns its final loss (Eq. 4) and the features f_n(x̃*)."""
    block_params = list(split.block.parameters())
    cls_params = list(split.classifier.parameters())
    x_dummy = x0.clone().requires_grad_(True)
    y_dummy = y0.clone().requires_grad_(optimise_labels)
    opt = torch.optim.Adam([x_dummy, y_dummy] if optimise_labels else [x_dummy], lr=step_size)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps) if schedule == "cosine" else None

    def loss_at() -> torch.Tensor:
        x_in = torch.relu(x_dummy) if nonnegative else x_dummy
        loss = soft_cross_entropy(split.classifier(split.block(x_in)), torch.softmax(y_dummy, 1))
        dummy = torch.autograd.grad(loss, block_params + cls_params, create_graph=True)
        d_n = gradient_distance(g_n, _flat(dummy[: len(block_params)]))
        d_c = gradient_distance(g_c, _flat(dummy[len(block_params) :]))
        return block_weight * d_n + d_c

    for _ in range(steps):
        opt.zero_grad()
        loss_at().backward()
        opt.step()
        if sched is not None:
            sched.step()
    final = float(loss_at().detach())
    with torch.no_grad():
        x_in = torch.relu(x_dummy) if nonnegative else x_dummy
        return final, torch.flatten(split.block(x_in), 1)


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
    labels: str = "optimised",
    init: str = "random",
    schedule: str = "constant",
    restarts: int = 1,
    nonnegative: bool = False,
    aux_x: np.ndarray | None = None,
    aux_y: np.ndarray | None = None,
) -> np.ndarray:
    """Reconstruct E(X) for each of the batch's ``batch_size`` samples from its gradient ``g``.

    ``grads`` maps the block's and classifier's parameter names to g (= Δw / η). Returns
    (batch_size, feature_dim) in arbitrary sample order (a gradient is a sum over the batch).
    The defaults are the seed's recipe (Eq. 4-7: random dummies, ỹ optimised, constant step α).
    What the seed leaves open, as options (each uses only g, the global model and auxiliary data):
    ``labels="inferred"`` fixes ỹ to the labels read from the output bias gradient
    (``infer_labels``; needs ``aux_x``); ``init="auxiliary"`` starts x̃ from auxiliary images'
    f_{n-1} outputs (of the inferred classes when labels are inferred and ``aux_y`` is given);
    ``init="analytic"`` then fits those starts so that f_n(x̃) matches the closed-form class-wise
    features of ``classwise_features`` (labels inferred for it in any case); ``init="per-sample"``
    fits them to ``per_sample_features`` refined from those instead; ``steps=0`` returns that
    closed-form estimate itself, without the seed's dummy optimisation;
    ``schedule="cosine"`` decays α to 0 over the steps; ``restarts`` runs the optimisation from
    that many starts and keeps the one with the lowest final loss; ``nonnegative`` feeds ReLU(x̃)
    to f_n, as f_{n-1} ends in a ReLU (and max-pool) here.
    """
    if labels not in ("optimised", "inferred") or init not in ("random", "auxiliary", "analytic", "per-sample"):
        raise ValueError(f"unknown labels={labels!r} or init={init!r}")
    if (labels == "inferred" or init != "random") and aux_x is None:
        raise ValueError("inferred labels and auxiliary initialisation need auxiliary images (aux_x)")
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    g_n = _flat([torch.as_tensor(grads[k]) for k in split.block_keys]).float()
    g_c = _flat([torch.as_tensor(grads[k]) for k in split.classifier_keys]).float()
    shape = split.block_input_shape(input_shape)
    fitted = init in ("analytic", "per-sample")
    inferred = infer_labels(split, grads, batch_size, aux_x) if labels == "inferred" or fitted else None
    classes = inferred if labels == "inferred" else None
    target = classwise_features(split, grads, inferred, aux_x, aux_y) if fitted else None
    if init == "per-sample":
        target = per_sample_features(split, grads, inferred, target)
    if steps == 0:  # no dummy optimisation: the closed-form estimate is the reconstruction
        if target is None:
            raise ValueError("steps = 0 needs init 'analytic' or 'per-sample'")
        return target.numpy()
    if init != "random":
        with torch.no_grad():
            aux_in = split.front(torch.as_tensor(aux_x))
    best: tuple[float, torch.Tensor] | None = None
    for _ in range(restarts):
        if init == "random":
            x0 = torch.rand(batch_size, *shape, generator=gen)
        elif inferred is not None and aux_y is not None:
            pools = [np.flatnonzero(aux_y == c) for c in inferred]
            x0 = aux_in[[int(rng.choice(p)) if len(p) else int(rng.integers(len(aux_in))) for p in pools]]
        else:
            x0 = aux_in[rng.choice(len(aux_in), size=batch_size, replace=len(aux_in) < batch_size)]
        if target is not None:
            x0 = _fit_block_input(split, x0, target)
        if classes is None:
            y0 = torch.randn(batch_size, num_classes, generator=gen)
        else:  # logits whose softmax is one-hot to float precision
            y0 = 100.0 * nn.functional.one_hot(torch.as_tensor(classes), num_classes).float()
        run = _restart(
            split, g_n, g_c, x0, y0, optimise_labels=classes is None, steps=steps, step_size=step_size,
            block_weight=block_weight, schedule=schedule, nonnegative=nonnegative,
        )  # fmt: skip
        if best is None or run[0] < best[0]:
            best = run
    assert best is not None
    return best[1].numpy()


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
    std = xt.std(0)
    # a unit (almost) never active on auxiliary data must not blow a reconstruction's small error in it up
    net.std.copy_(std.clamp_min(STD_FLOOR * float(std.mean()) + 1e-12))
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
