"""Many users' DeviceUpdate in one computation: ``core.training.local_update`` batched over users.

The attacker replays every known user's local training each round (seed 001 §6); one user after
another, that costs more than the federation's own training. Here each user gets a copy of the
parameters, stacked on a leading user axis, and one ``torch.func.vmap(torch.func.grad(...))`` of a
``torch.func.functional_call`` computes all users' gradients of a step at once; a hand-written
SGD (momentum) / Adam step, written op for op like ``torch.optim``'s single-tensor path, updates
the stack. Results equal the loop's within float tolerance (kernels differ: a vmapped conv is a
grouped conv, the LSTM below is not the fused one), not bit for bit; where the loop's own training
amplifies rounding (batch norm over a batch of 2, or over 1x1 feature maps of a few examples), no
replay on other kernels can match it closer than that amplification allows.

Threat model: the caller (``attacks.shadow``) replays training on the attacker's own prior data
only; this module is training code and knows nothing of the attack. It removes per-step overhead
and wasted work, not arithmetic: on a CPU, where one user's steps already run compute-bound
kernels, the gain is small (benchmarks/README.md); on CUDA, where one user's small kernels leave
the device idle, it should pay most (not yet measured).

What makes it the loop's training rather than an approximation:

* Batch order: each user's steps are ``batch_indices(len(data), cfg, seed)`` with its own seed.
* Ragged users: users are sorted by schedule, so the users still training at step s are a prefix
  of the stack (updates only touch that prefix; finished users keep parameters and optimizer
  state). Short batches (an epoch's last) are padded with a per-example mask and the loss is the
  mean over the real examples (for next-token: over targets != 0, as ``loss_fn``'s
  ``ignore_index=0``); a group without padding uses ``loss_fn`` itself.
* A share of a chunk (``company``): how far a step pads and which loss it takes depend on the
  users trained together, so a caller that trains a share of a chunk here (one of several shadow
  lanes) names the whole chunk, and each step pads and takes the loss path as the whole chunk's
  would. Each user's update is then the whole chunk's, bit for bit, where every kernel computes a
  user's slice of a stack alike whatever the stack's size (``stack_invariant``: measured for the
  LSTMs); a vmapped convolution is a grouped one, and oneDNN runs another kernel for one or two
  groups than for more, so there a share's updates may differ in their last bits
  (``tests/attacks/test_shadow_shares.py``).
* Batch norm: in train mode it normalises with the batch's statistics and only *writes* its
  running statistics, which no parameter depends on. The working copy drops them
  (``torch.func.replace_all_batch_norm_modules_``), so the parameters train as in the loop; the
  running statistics are not replayed (they are buffers, never in ``core.models.attack_keys``).
  Padding would enter the batch statistics, so models with batch norm are never padded: a step
  runs one vmapped call per run of users with the same batch size.
* Dropout (MobileNetV3's classifier): the loop draws each mask from the global generator that
  ``torch.manual_seed(seed)`` seeded just before ``local_update`` (``attacks.shadow`` does so).
  The masks are drawn up front with that seed, the same op (``F.dropout`` on ones), shape and
  device, in the same order, and multiplied in: they are the loop's masks.
* ``nn.LSTM`` has no vmap rule (functorch falls back to a slow per-user loop), so the working copy
  runs an LSTM written in plain tensor ops, with the same parameter names and gate order.
* Next-token models on the CPU: the final linear layer and the cross-entropy run fused
  (``_LinearCrossEntropy``), per user and in blocks of tokens, over the targets the loss counts
  only (!= 0, real examples): a batch's logits over a 5000-word vocabulary, times the users, would
  not fit any cache, and padded targets add nothing to the loss or its gradient. The gradient is
  the loop's (softmax - one-hot) / count.

``unsupported`` names what the batched path cannot express; callers fall back to the loop there.
"""

from __future__ import annotations

import copy
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, replace_all_batch_norm_modules_, vmap

from leakbed.core.data.corpus import Task, UserData
from leakbed.core.models import final_linear
from leakbed.core.training import TrainConfig, batch_indices, loss_fn

ADAM_BETAS = (0.9, 0.999)  # torch.optim.Adam's defaults, which core.training._optimizer uses
ADAM_EPS = 1e-8
CPU_CHUNK_BYTES = 2 << 30  # parameters, optimizer state and activations of one chunk of users on the CPU
CUDA_CHUNK_SHARE = 0.5  # on CUDA: this share of the free device memory
LOGIT_BLOCK = 1 << 20  # logits per block of the fused head (4 MiB in float32: stays in cache)
# Where next-token models fuse head and loss: on the CPU, a step's logits (users x tokens x vocabulary)
# would not fit any cache; on CUDA the vmapped logits and cross-entropy are a few large kernels, while the
# fused head's per-user blocks would be thousands of small ones.
FUSED_HEAD_DEVICES = ("cpu",)


class _VmapLSTM(nn.Module):
    """``nn.LSTM`` (unidirectional, no projection) in plain tensor ops, same parameter names."""

    def __init__(self, lstm: nn.LSTM) -> None:
        super().__init__()
        self.hidden = lstm.hidden_size
        self.layers = lstm.num_layers
        self.batch_first = lstm.batch_first
        self.bias = lstm.bias
        for name, p in lstm.named_parameters():
            self.register_parameter(name, nn.Parameter(p.detach().clone(), requires_grad=p.requires_grad))

    def forward(
        self, x: torch.Tensor, hx: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        if hx is not None:
            raise ValueError("the batched LSTM starts from zero states only")
        if not self.batch_first:
            x = x.transpose(0, 1)
        hs, cs = [], []
        for layer in range(self.layers):
            w_ih = getattr(self, f"weight_ih_l{layer}")
            w_hh = getattr(self, f"weight_hh_l{layer}")
            gates_x = x @ w_ih.T
            if self.bias:
                gates_x = gates_x + (getattr(self, f"bias_ih_l{layer}") + getattr(self, f"bias_hh_l{layer}"))
            h = c = x.new_zeros(x.shape[0], self.hidden)
            outs = []
            for step_x in gates_x.unbind(1):  # not gates_x[:, t]: each slice's backward would fill a full-size zero tensor
                i, f, g, o = (step_x + h @ w_hh.T).chunk(4, dim=1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
                outs.append(h)
            x = torch.stack(outs, 1)
            hs.append(h)
            cs.append(c)
        out = x if self.batch_first else x.transpose(0, 1)
        return out, (torch.stack(hs), torch.stack(cs))


class _MaskDropout(nn.Module):
    """Dropout with the mask handed in per call (a buffer ``functional_call`` replaces)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mask", torch.ones(()), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.mask


def _linear_ce(
    h: torch.Tensor, w: torch.Tensor, b: torch.Tensor, y: torch.Tensor, keep: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per user u: mean cross-entropy of ``h[u] @ w[u].T + b[u]`` over the tokens ``keep[u]`` and its
    gradients (loss (U,), d/dh, d/dw, d/db), in blocks of tokens. No kept token: loss NaN, zero
    gradients, as ``cross_entropy`` with every target ignored."""
    loss = h.new_zeros(h.shape[0])
    gh, gw, gb = torch.zeros_like(h), torch.zeros_like(w), torch.zeros_like(b)
    block = max(1, LOGIT_BLOCK // w.shape[1])
    for u in range(h.shape[0]):
        idx = keep[u].nonzero().squeeze(1)
        count = len(idx)
        if not count:
            loss[u] = float("nan")
            continue
        total = h.new_zeros(())
        for start in range(0, count, block):
            rows = idx[start : start + block]
            hv, yv = h[u, rows], y[u, rows]
            z = torch.addmm(b[u], hv, w[u].T)
            top = z.amax(1, keepdim=True)
            target = z.gather(1, yv[:, None]) - top
            p = z.sub_(top).exp_()  # one exp pass, in place of the logits
            norm = p.sum(1, keepdim=True)
            total += (norm.log() - target).sum()  # -log softmax at the targets
            p.div_(norm * count)  # (softmax - one-hot) / count: the loop's gradient of the logits
            p[torch.arange(len(rows), device=p.device), yv] -= 1 / count
            gw[u].addmm_(p.T, hv)
            gb[u] += p.sum(0)
            gh[u, rows] = p @ w[u]
        loss[u] = total / count
    return loss, gh, gw, gb


class _LinearCrossEntropy(torch.autograd.Function):
    """``loss_fn`` for next-token on ``linear(h)``, computed with its gradients in one pass (``_linear_ce``);
    its vmap rule hands the whole user axis to ``_linear_ce``. Outputs: loss, then the gradients
    (non-differentiable) that backward scales."""

    @staticmethod
    def forward(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor, y: torch.Tensor, keep: torch.Tensor) -> Any:
        return tuple(o[0] for o in _linear_ce(h[None], w[None], b[None], y[None], keep[None]))

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        ctx.save_for_backward(*output[1:])
        ctx.mark_non_differentiable(*output[1:])

    @staticmethod
    def backward(ctx: Any, g_loss: torch.Tensor, *_: torch.Tensor) -> tuple:
        gh, gw, gb = ctx.saved_tensors
        return g_loss * gh, g_loss * gw, g_loss * gb, None, None

    @staticmethod
    def vmap(info: Any, in_dims: tuple, *args: torch.Tensor) -> tuple:
        moved = [a.movedim(d, 0) if d is not None else a.expand(info.batch_size, *a.shape)
                 for a, d in zip(args, in_dims, strict=True)]
        return _linear_ce(*moved), (0, 0, 0, 0)


def _dropouts(model: nn.Module) -> dict[str, float]:
    """Dropout modules that drop anything in train mode, by name, with their p."""
    return {n: m.p for n, m in model.named_modules() if isinstance(m, nn.Dropout) and m.p > 0}


@dataclass(frozen=True)
class _Probe:
    """What one eval-mode forward of a single example shows."""

    dropout_calls: list[tuple[str, tuple[int, ...]]]  # (module, input shape without the batch axis), in call order
    values: int  # activation values per example: outputs of the leaf modules
    head_values: int  # of which the final linear layer's output
    head_is_output: bool  # the final linear layer runs once and its output is the model's output


def _probe(model: nn.Module, example: torch.Tensor) -> _Probe:
    calls: list[tuple[str, tuple[int, ...]]] = []
    values: list[int] = []
    head_outs: list[torch.Tensor] = []
    drop = _dropouts(model)
    head = _final(model)
    work = copy.deepcopy(model).eval()
    hooks = []
    for name, m in work.named_modules():
        if name in drop:
            hooks.append(m.register_forward_pre_hook(lambda _m, args, name=name: calls.append((name, tuple(args[0].shape[1:])))))
        if name == head:
            hooks.append(m.register_forward_hook(lambda _m, _a, out: head_outs.append(out)))
        if not list(m.children()):
            hooks.append(m.register_forward_hook(lambda _m, _a, out: values.append(_numel(out))))
    with torch.no_grad():
        out = work(example)
    for h in hooks:
        h.remove()
    head_is_output = len(head_outs) == 1 and head_outs[0] is out
    return _Probe(calls, sum(values), head_outs[0].numel() if head_is_output else 0, head_is_output)


def _final(model: nn.Module) -> str | None:
    try:
        return final_linear(model)
    except ValueError:
        return None


def _numel(out: object) -> int:
    if isinstance(out, torch.Tensor):
        return out.numel()
    if isinstance(out, (tuple, list)):
        return sum(_numel(o) for o in out)
    return 0


def unsupported(model: nn.Module, example: torch.Tensor | None = None) -> str | None:
    """Why the batched path cannot replay ``model`` exactly (None: it can); with an ``example`` input
    (a batch of one) it also checks that each dropout module runs once per forward."""
    for name, m in model.named_modules():
        if isinstance(m, nn.RNNBase) and not (type(m) is nn.LSTM and not m.bidirectional and not m.proj_size):
            return f"{name}: only unidirectional nn.LSTM without projection is batched, not {m}"
        if isinstance(m, nn.LSTM) and m.dropout and m.num_layers > 1:
            return f"{name}: dropout between LSTM layers"
        if isinstance(m, nn.modules.dropout._DropoutNd) and type(m) is not nn.Dropout and m.p > 0:
            return f"{name}: {type(m).__name__} (only nn.Dropout masks are replayed)"
    left = [n for n, _ in replace_all_batch_norm_modules_(copy.deepcopy(model)).named_buffers()]
    if left:
        return f"buffers the forward may update: {', '.join(left[:3])}"
    if example is not None and _dropouts(model):
        names = [n for n, _ in _probe(model, example).dropout_calls]
        if len(set(names)) != len(names):
            return f"a dropout module runs more than once per forward ({', '.join(names)})"
    return None


def stack_invariant(model: nn.Module) -> bool:
    """Whether ``batched_local_updates`` gives each user of ``model`` the same bits whatever the number of users stacked
    with it (and so a share of a chunk, in its ``company``, the whole chunk's updates): no convolution. A vmapped
    convolution is a grouped one, and oneDNN picks another algorithm for one or two groups than for more (measured:
    the CNN's first weight gradient differs in its last bits over 2 users from over 60); the LSTMs' stacked matmuls,
    the fused head's per-user loop and the optimizer's elementwise steps compute each user's slice alike (measured:
    the same bits in 1, 2, 3 and 7 shares)."""
    return not any(isinstance(m, nn.modules.conv._ConvNd) for m in model.modules())


def _fused_head(model: nn.Module, task: Task, probe: _Probe, device: torch.device) -> str | None:
    """The final linear layer to fuse with the loss (next-token on ``FUSED_HEAD_DEVICES``), or None."""
    head = _final(model)
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    if task != "next-token" or device.type not in FUSED_HEAD_DEVICES or head is None or not probe.head_is_output:
        return None
    return None if {f"{head}.weight", f"{head}.bias"} - names else head


def _working_copy(model: nn.Module, device: torch.device, head: str | None) -> nn.Module:
    """The copy vmap runs: batch norm without running stats, the vmap LSTM, mask dropout, the fused
    head's layer as identity (the loss applies it); train mode."""
    work = replace_all_batch_norm_modules_(copy.deepcopy(model))
    for name, m in list(work.named_modules()):
        new: nn.Module | None = None
        if isinstance(m, nn.LSTM):
            new = _VmapLSTM(m)
        elif isinstance(m, nn.Dropout) and m.p > 0:
            new = _MaskDropout()
        elif name == head:
            new = nn.Identity()
        if new is not None:
            parent, _, attr = name.rpartition(".")
            setattr(work.get_submodule(parent), attr, new)
    return work.to(device).train()


def _masked_loss(task: Task, logits: torch.Tensor, y: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """``loss_fn`` over the real (unpadded) examples of a padded batch: the same means, same ``ignore_index``."""
    real = real.to(logits.dtype)
    if task == "multilabel":
        per = nn.functional.binary_cross_entropy_with_logits(logits, y, reduction="none")
        return (per * real[:, None]).sum() / (real.sum() * per.shape[1])
    if task == "next-token":
        per = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=0, reduction="none")
        keep = ((y != 0) * real[:, None]).reshape(-1)
        return (per * keep).sum() / keep.sum().clamp(min=1)  # no target: zero gradient, as the loop's
    per = nn.functional.cross_entropy(logits, y, reduction="none")
    return (per * real).sum() / real.sum()


def _dropout_masks(
    calls: list[tuple[str, tuple[int, ...]]], drop: dict[str, float], sizes: list[int], seed: int, device: torch.device
) -> list[dict[str, torch.Tensor]]:
    """One user's dropout masks per step, drawn as the loop draws them after ``torch.manual_seed(seed)``."""
    if not calls:
        return [{} for _ in sizes]
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices, device_type="cuda"):
        torch.manual_seed(seed)
        return [
            {f"{name}.mask": nn.functional.dropout(torch.ones((b, *shape), device=device), drop[name], training=True)
             for name, shape in calls}
            for b in sizes
        ]


class _Optimizer:
    """SGD (momentum, dampening 0, no Nesterov) or Adam (defaults) over stacked parameters, op for op
    as torch.optim's single-tensor path; a step updates the first ``k`` users only."""

    def __init__(self, params: dict[str, torch.Tensor], cfg: TrainConfig) -> None:
        self.cfg = cfg
        self.adam = cfg.optimizer == "adam"
        self.state: dict[str, list[torch.Tensor]] = {}
        if self.adam:
            self.state = {n: [torch.zeros_like(p), torch.zeros_like(p)] for n, p in params.items()}
        elif cfg.momentum != 0:
            self.state = {n: [torch.zeros_like(p)] for n, p in params.items()}

    @torch.no_grad()
    def step(self, params: dict[str, torch.Tensor], grads: dict[str, torch.Tensor], k: int, step: int) -> None:
        lr = self.cfg.lr
        for name, p in params.items():
            p, g = p[:k], grads[name]
            if self.adam:
                beta1, beta2 = ADAM_BETAS
                exp_avg, exp_avg_sq = (s[:k] for s in self.state[name])
                exp_avg.lerp_(g, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                bias_correction1 = 1 - beta1 ** float(step + 1)
                bias_correction2 = 1 - beta2 ** float(step + 1)
                step_size = lr / bias_correction1
                denom = (exp_avg_sq.sqrt() / bias_correction2**0.5).add_(ADAM_EPS)
                p.addcdiv_(exp_avg, denom, value=-step_size)
                continue
            if self.cfg.momentum != 0:
                buf = self.state[name][0][:k]
                if step == 0:
                    buf.copy_(g)  # torch.optim.SGD: the buffer starts as the first gradient
                else:
                    buf.mul_(self.cfg.momentum).add_(g, alpha=1)
                g = buf
            p.add_(g, alpha=-lr)


def chunk_users(model: nn.Module, example: torch.Tensor, task: Task, cfg: TrainConfig, device: torch.device, cap: int) -> int:
    """Users per chunk: at most ``cap`` and what fits ``CPU_CHUNK_BYTES`` (CUDA: a share of free memory),
    counting parameters, gradients, optimizer state and ~3 copies of each leaf module's activations."""
    params = sum(p.numel() for p in model.parameters())
    states = 2 if cfg.optimizer == "adam" else (1 if cfg.momentum else 0)
    probe = _probe(model, example[:1])
    values = probe.values - (probe.head_values if _fused_head(model, task, probe, device) else 0)
    per_user = 4 * (params * (3 + states) + 3 * values * cfg.batch_size)
    budget = CPU_CHUNK_BYTES
    if device.type == "cuda":
        budget = int(torch.cuda.mem_get_info(device)[0] * CUDA_CHUNK_SHARE)
    return max(1, min(cap, budget // max(per_user, 1)))


def batched_local_updates(
    model: nn.Module,
    global_arrays: dict[str, np.ndarray],
    data: Sequence[UserData],
    task: Task,
    cfg: TrainConfig,
    *,
    seeds: Sequence[int],
    device: torch.device,
    keys: Sequence[str],
    timings: dict[str, float] | None = None,
    company: Sequence[tuple[int, int]] = (),
) -> dict[str, torch.Tensor]:
    """Parameters ``keys`` after each user's ``local_update`` from ``global_arrays``, stacked (users, ...)
    on the CPU in the order of ``data``; dropout as if ``torch.manual_seed(seeds[u])`` came first.

    One computation for all users given: the caller chunks (``chunk_users``) to bound memory.
    ``timings``, when given, accumulates seconds per phase (prepare, gradients, optimizer, collect).
    ``company``: (examples, seed) of every user of the chunk that ``data`` is a share of (``data``'s own
    included); each step then pads and takes its loss path as that chunk's, so the updates are the chunk's.
    """
    clock = _Clock(device, timings)
    nonempty = [d for d in data if len(d)]
    example = torch.from_numpy(nonempty[0].x[:1]) if nonempty else None
    reason = unsupported(model, example)
    if reason:
        raise ValueError(f"not batchable: {reason}")
    users = len(data)
    plans = [batch_indices(len(d), cfg, seed) for d, seed in zip(data, seeds, strict=True)]
    order = sorted(range(users), key=lambda u: (-len(plans[u]), [-len(i) for i in plans[u]]))
    sizes = [[len(i) for i in plans[u]] for u in order]
    if company and Counter((len(d), seed) for d, seed in zip(data, seeds, strict=True)) - Counter(company):
        raise ValueError("company must hold every user given (examples, seed)")
    shape = _step_shapes([[len(i) for i in batch_indices(n, cfg, seed)] for n, seed in company] if company else sizes)
    probe = _probe(model, example) if example is not None else _Probe([], 0, 0, False)
    head = _fused_head(model, task, probe, device)
    work = _working_copy(model, device, head)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    arrays = {n: torch.from_numpy(np.asarray(global_arrays[n])).to(device) for n, _ in model.named_parameters()}
    frozen = {n: a for n, a in arrays.items() if n not in trainable}
    params = {n: arrays[n].expand(users, *arrays[n].shape).clone() for n in trainable}
    split = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    drop = _dropouts(model)
    masks = [_dropout_masks(probe.dropout_calls, drop, sizes[r], seeds[u], device) for r, u in enumerate(order)]
    xs = torch.cat([torch.from_numpy(data[u].x) for u in order]).to(device)
    ys = torch.cat([torch.from_numpy(data[u].y) for u in order]).to(device)
    offsets = np.cumsum([0] + [len(data[u]) for u in order])

    def user_loss(p: dict[str, torch.Tensor], drop_masks: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                  real: torch.Tensor, padded: bool) -> torch.Tensor:
        out = functional_call(work, {**p, **frozen, **drop_masks}, (x,))
        if head:
            keep = ((y != 0) & real[:, None]).reshape(-1)
            h = out.reshape(keep.shape[0], -1)
            return _LinearCrossEntropy.apply(h, p[f"{head}.weight"], p[f"{head}.bias"], y.reshape(-1), keep)[0]
        return _masked_loss(task, out, y, real) if padded else loss_fn(task, out, y)

    grads_of = {padded: vmap(grad(lambda *a, padded=padded: user_loss(*a, padded=padded))) for padded in (False, True)}
    opt = _Optimizer(params, cfg)
    clock.lap("prepare")
    for step in range(max((len(s) for s in sizes), default=0)):
        k = sum(1 for s in sizes if len(s) > step)
        runs = _runs([s[step] for s in sizes[:k]], split=split)
        grads: dict[str, torch.Tensor] = {}
        for lo, hi in runs:
            b = max(sizes[r][step] for r in range(lo, hi))
            padded = any(sizes[r][step] < b for r in range(lo, hi))
            if not split:  # one group of every active user: padded to the chunk's batch, on the chunk's loss path
                b, padded = shape[step]
            idx = torch.zeros((hi - lo, b), dtype=torch.long)
            real = torch.zeros((hi - lo, b), dtype=torch.bool)
            for j, r in enumerate(range(lo, hi)):
                own = plans[order[r]][step]
                idx[j] = int(offsets[r])
                idx[j, : len(own)] += own
                real[j, : len(own)] = True
            idx = idx.to(device)
            group = {n: p[lo:hi] for n, p in params.items()}
            drop_masks = {name: _stack_padded([masks[r][step][name] for r in range(lo, hi)], b) for name in masks[lo][step]}
            g = grads_of[padded](group, drop_masks, xs[idx], ys[idx], real.to(device))
            if len(runs) == 1:
                grads = g
                break
            for n, v in g.items():
                grads.setdefault(n, torch.empty((k, *v.shape[1:]), dtype=v.dtype, device=device))[lo:hi] = v
        clock.lap("gradients")
        opt.step(params, grads, k, step)
        clock.lap("optimizer")
    back = torch.from_numpy(np.argsort(order)).to(device)
    out = {key: (params[key] if key in params else frozen[key].expand(users, *frozen[key].shape))[back].cpu() for key in keys}
    clock.lap("collect")
    return out


class _Clock:
    """Per-phase wall seconds into ``timings`` (nothing when None); waits for CUDA so phases do not blur."""

    def __init__(self, device: torch.device, timings: dict[str, float] | None) -> None:
        self.cuda = device.type == "cuda"
        self.timings = timings
        self.last = time.perf_counter()

    def lap(self, phase: str) -> None:
        if self.timings is None:
            return
        if self.cuda:
            torch.cuda.synchronize()
        now = time.perf_counter()
        self.timings[phase] = self.timings.get(phase, 0.0) + now - self.last
        self.last = now


def _stack_padded(parts: list[torch.Tensor], b: int) -> torch.Tensor:
    """Masks of a group's users, each padded with zeros to ``b`` rows."""
    return torch.stack([nn.functional.pad(p, (0, 0) * (p.dim() - 1) + (0, b - p.shape[0])) for p in parts])


def _step_shapes(sizes: list[list[int]]) -> list[tuple[int, bool]]:
    """Per step, over the users still training (each user's batch sizes in ``sizes``): the batch the group pads to
    (the largest) and whether any of them is padded (its loss path)."""
    out = []
    for step in range(max((len(s) for s in sizes), default=0)):
        now = [s[step] for s in sizes if len(s) > step]
        out.append((max(now), min(now) < max(now)))
    return out


def _runs(sizes: list[int], *, split: bool) -> list[tuple[int, int]]:
    """Slices of the active users computed together: all of them (padded), or with batch norm each run
    of equal batch sizes (padding would enter the batch statistics)."""
    if not split:
        return [(0, len(sizes))]
    out, lo = [], 0
    for r in range(1, len(sizes) + 1):
        if r == len(sizes) or sizes[r] != sizes[lo]:
            out.append((lo, r))
            lo = r
    return out
