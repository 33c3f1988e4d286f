"""Shadow updates, one user after another vs batched (core.batched_training), for one round.

``python -m benchmarks.shadow [--repeats 3] [--threads 1 2] [--lm-users 55] [--lm-mean-post 50] [--device cpu]``

Two workloads, each one round of ``attacks.shadow.shadow_updates`` on the round-1 global model:

* cnn: ``leakbed/configs/quickstart.toml`` (60 synthetic users, 16x16 RGB, SmallCNN, 1 epoch of batch 16,
  SGD lr 0.1), random prior rule: half of each user's data is the attacker's prior.
* lstm_lm: ``--lm-users`` users of **synthetic** token data at the seed's LSTM language-model sizes
  (vocabulary 5000, embedding 100, LSTM 64) and the loaders' shape: each user writes posts of
  log-normal length (median ``--lm-mean-post`` tokens), cut into 81-token windows padded at the end
  with <pad> = 0 as ``core.data.tff_hdf5``/``table`` cut theirs (``--lm-mean-post 0``: one endless
  text, no padding); the prior is half of a user's log-normal number of windows (median 60).
  Tokens are Zipf-distributed; the config's FL defaults (1 epoch of batch 16, SGD lr 0.05).

Each (workload, threads) pair runs both paths once to warm up (first-call costs are reported
apart), then ``--repeats`` times alternating, and reports the medians of wall and process CPU
seconds, where the time goes (``shadow_updates``' phases), and the largest difference between the
two paths' L2-normalised vectors. Threads: ``torch.set_num_threads`` and threadpoolctl's limit,
as the attack workers set them (1). Exit status 1 when the paths disagree by more than 1e-4 or
label users differently. The last line of stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import finish, fmt, table

REPO = Path(__file__).resolve().parents[1]
VOCAB, SEQ_LEN = 5000, 80
TOLERANCE = 1e-4


def _cnn() -> tuple[Any, Any, str]:
    """Knowledge and round-1 snapshot of the quickstart federation."""
    import torch

    from leakbed.core.config import build_config
    from leakbed.core.data import federation
    from leakbed.core.knowledge import AttackerKnowledge
    from leakbed.core.models import attack_keys, build_model
    from leakbed.core.records import RoundSnapshot
    from leakbed.core.training import TrainConfig, state_arrays

    cfg = build_config(tomllib.loads((REPO / "leakbed/configs/quickstart.toml").read_text()), [])
    fed = federation(cfg, "random")
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, fed.corpus)
    knowledge = AttackerKnowledge(
        prior=fed.prior(),
        corpus_meta=replace(fed.corpus, users={}),
        model=cfg.model,
        keys=attack_keys(model, cfg.model.attack_layers),
        seed=0,
        device="cpu",
    )
    fl = cfg.fl
    train = TrainConfig(fl.local_epochs, fl.batch_size, fl.lr, fl.optimizer, fl.momentum, fl.local_steps)
    return knowledge, RoundSnapshot(1, state_arrays(model), train.to_config()), "leakbed/configs/quickstart.toml, random prior"


def _lm_user(rng: np.random.Generator, windows: int, mean_post: int) -> tuple[np.ndarray, np.ndarray]:
    """``windows`` next-token windows (x, y) of one user's posts, each padded at its end."""
    width = SEQ_LEN + 1
    rows: list[np.ndarray] = []
    while len(rows) < windows:
        length = 10 * width * windows if mean_post == 0 else int(np.clip(rng.lognormal(np.log(mean_post), 0.8), 3, 2000))
        ids = np.minimum(rng.zipf(1.1, length), VOCAB - 4) + 3  # 4.. VOCAB-1; 0-3 are the specials
        cut = -(-length // width)
        post = np.zeros(cut * width, np.int64)
        post[:length] = ids
        rows += list(post.reshape(cut, width))
    w = np.stack(rows[:windows])
    return np.ascontiguousarray(w[:, :-1]), np.ascontiguousarray(w[:, 1:])


def _lstm_lm(users: int, mean_post: int) -> tuple[Any, Any, str]:
    import torch

    from leakbed.core.config import FLConfig, ModelConfig
    from leakbed.core.data.corpus import Corpus, UserData
    from leakbed.core.knowledge import AttackerKnowledge
    from leakbed.core.models import attack_keys, build_model
    from leakbed.core.records import RoundSnapshot
    from leakbed.core.training import TrainConfig, state_arrays

    rng = np.random.default_rng(0)
    prior = {}
    for u in range(users):
        windows = int(np.clip(rng.lognormal(np.log(60), 0.6), 8, 600)) // 2  # half of the user's data
        x, y = _lm_user(rng, windows, mean_post)
        prior[f"user{u:03d}"] = UserData(x, y, np.arange(len(x), dtype=np.float64))
    corpus = Corpus("synthetic-lm", "next-token", VOCAB, (SEQ_LEN,), {})
    model_cfg = ModelConfig(name="lstm-lm")
    torch.manual_seed(0)
    model = build_model(model_cfg, corpus)
    knowledge = AttackerKnowledge(prior, corpus, model_cfg, attack_keys(model, ["final"]), 0, "cpu")
    fl = FLConfig()
    train = TrainConfig(fl.local_epochs, fl.batch_size, fl.lr, fl.optimizer, fl.momentum, fl.local_steps)
    pad = float(np.mean([np.mean(d.y == 0) for d in prior.values()]))
    return knowledge, RoundSnapshot(1, state_arrays(model), train.to_config()), f"synthetic tokens, {pad:.0%} of targets <pad>"


def _run(knowledge: Any, snap: Any, batch_users: int) -> tuple[float, float, dict[str, float], list[str], np.ndarray]:
    from leakbed.attacks.shadow import shadow_updates

    k = replace(knowledge, shadow_batch_users=batch_users)
    phases: dict[str, float] = {}
    wall, cpu = time.perf_counter(), time.process_time()
    labels, vectors = shadow_updates(k, snap, timings=phases)
    return time.perf_counter() - wall, time.process_time() - cpu, phases, labels, vectors


def _measure(knowledge: Any, snap: Any, threads: int, repeats: int, batch_users: int) -> dict[str, Any]:
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(threads)
    with threadpool_limits(threads):
        first = {"loop": _run(knowledge, snap, 0), "batched": _run(knowledge, snap, batch_users)}
        runs: dict[str, list[tuple]] = {"loop": [], "batched": []}
        for r in range(repeats):
            for path in ("loop", "batched") if r % 2 == 0 else ("batched", "loop"):
                runs[path].append(_run(knowledge, snap, 0 if path == "loop" else batch_users))
    out: dict[str, Any] = {"threads": threads}
    for path, rs in runs.items():
        out[path] = {
            "wall_s": statistics.median(r[0] for r in rs),
            "cpu_s": statistics.median(r[1] for r in rs),
            "first_call_wall_s": first[path][0],
            "phases_s": {p: statistics.median(r[2].get(p, 0.0) for r in rs) for p in rs[0][2]},
        }
    loop, batched = runs["loop"][-1], runs["batched"][-1]
    out["speedup"] = out["loop"]["wall_s"] / out["batched"]["wall_s"]
    out["speedup_cpu"] = out["loop"]["cpu_s"] / out["batched"]["cpu_s"]
    out["max_abs_diff"] = float(np.abs(loop[4] - batched[4]).max())
    out["labels_equal"] = loop[3] == batched[3]
    return out


def _device_name(device: str) -> str:
    """``cpu``, or the CUDA card's name (the figures depend on it)."""
    if device == "cpu":
        return "cpu"
    import torch

    return f"cuda ({torch.cuda.get_device_name(0)})"


def _steps(knowledge: Any, snap: Any) -> int:
    from leakbed.core.training import TrainConfig, batch_indices

    cfg = TrainConfig.from_config(snap.train_config)
    return sum(len(batch_indices(len(d), cfg, 0)) for d in knowledge.prior.values())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.shadow", description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3, help="timed runs per path after one warm-up (default 3)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch/BLAS threads to measure (default 1 2)")
    p.add_argument("--lm-users", type=int, default=55, help="users of the LSTM LM workload (default 55)")
    p.add_argument("--lm-mean-post", type=int, default=50, help="median post length [tokens]; 0 = no padding (default 50)")
    p.add_argument("--batch-users", type=int, default=64, help="attack.shadow_batch_users of the batched path (default 64)")
    p.add_argument("--only", choices=["cnn", "lstm_lm"], help="run one workload")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where the shadow updates train (default cpu)")
    args = p.parse_args(argv)

    workloads = {"cnn": _cnn, "lstm_lm": lambda: _lstm_lm(args.lm_users, args.lm_mean_post)}
    print("== shadow updates of one round: one user at a time vs batched (core.batched_training)")
    print(f"  repeats: {args.repeats} (median), threads: {args.threads}, shadow_batch_users: {args.batch_users}")
    print(f"  load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; device {_device_name(args.device)}", flush=True)
    summary: dict[str, Any] = {}
    for name, build in workloads.items():
        if args.only and name != args.only:
            continue
        knowledge, snap, note = build()
        knowledge = replace(knowledge, device=args.device)
        sizes = [len(d) for d in knowledge.prior.values()]
        info: dict[str, Any] = {"users": len(sizes), "prior_examples": sum(sizes), "local_steps": _steps(knowledge, snap)}
        info["data"] = note
        print(f"-- {name}: {info}", flush=True)
        for t in args.threads:
            info[f"threads{t}"] = _measure(knowledge, snap, t, args.repeats, args.batch_users)
        summary[name] = info
    _report(summary)
    first = [s[f"threads{args.threads[0]}"] for s in summary.values()]
    total_batched = sum(r["batched"]["wall_s"] for r in first)
    ok = all(r["labels_equal"] and r["max_abs_diff"] <= TOLERANCE for s in summary.values() for r in _results(s))
    cpu_batched = sum(r["batched"]["cpu_s"] for r in first)
    finish(Path("."), False, {
        "speedup": sum(r["loop"]["wall_s"] for r in first) / total_batched if total_batched else None,
        "speedup_cpu": sum(r["loop"]["cpu_s"] for r in first) / cpu_batched if cpu_batched else None,
        "speedup_threads": args.threads[0],
        **summary,
        "load_average": os.getloadavg()[0],
        "device": _device_name(args.device),
        "ok": ok,
    })
    return 0 if ok else 1


def _results(workload: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for k, r in workload.items() if k.startswith("threads")]


def _report(summary: dict[str, Any]) -> None:
    """The table, then where the time goes."""
    header = ["workload", "threads", "loop [s]", "batched [s]", "speedup"]
    header += ["loop CPU [s]", "batched CPU [s]", "CPU speedup", "max |diff|"]
    rows = [
        [name, r["threads"], r["loop"]["wall_s"], r["batched"]["wall_s"], r["speedup"], r["loop"]["cpu_s"], r["batched"]["cpu_s"],
         r["speedup_cpu"], f"{r['max_abs_diff']:.1e}"]
        for name, s in summary.items()
        for r in _results(s)
    ]
    print(table(header, rows))
    print("phases (median wall seconds; first call = the warm-up run):")
    for name, s in summary.items():
        for r in _results(s):
            for path in ("loop", "batched"):
                phases = ", ".join(f"{p} {fmt(v)}" for p, v in r[path]["phases_s"].items())
                print(f"  {name} threads {r['threads']} {path}: {phases}; first call {fmt(r[path]['first_call_wall_s'])}")


if __name__ == "__main__":
    sys.exit(main())
