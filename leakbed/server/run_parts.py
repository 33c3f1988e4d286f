"""What a run sets up before its FL loop: seeding, the federation, the model and its attack keys, the update
store, the truth sealer, the test set, the device plan and the attack pool."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from flwr.app import ConfigRecord

from leakbed.core.adoption import defending_users
from leakbed.core.batched_training import stack_invariant
from leakbed.core.config import ExperimentConfig
from leakbed.core.data import Federation, UserData, federation
from leakbed.core.declaration import Declaration, needs_of
from leakbed.core.derive import derived_seed
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.layout import RunLayout
from leakbed.core.models import attack_keys, build_model
from leakbed.core.plan import PLAN_KEY, DevicePlan
from leakbed.core.records import received_fields
from leakbed.core.store import UpdateStore
from leakbed.core.training import TrainConfig, evaluate, pick_device
from leakbed.referee.seal import Sealer
from leakbed.server.cores import shadow_lanes
from leakbed.server.plan import device_plan
from leakbed.workers import AttackPool
from leakbed.workers.sandbox import limits_for
from leakbed.workers.tls import tls_files

Progress = Callable[[int, dict[str, float]], None]
FIT_FAILED = "fit failed or timed out (see pool errors)"


def knowledge(cfg: ExperimentConfig, fed: Federation, keys: list[str]) -> AttackerKnowledge:
    """What the curious server's attacks know: prior data by identity, the corpus' shape, the model, and a seed of
    their own; no private data, no data recipe, no experiment seed, nothing of how they are run."""
    return AttackerKnowledge(
        prior=fed.prior(),
        corpus_meta=replace(fed.corpus, users={}),
        model=cfg.model,
        keys=keys,
        seed=derived_seed(cfg.seed, "attacker"),
        device=cfg.device,
        shadow_batch_users=cfg.attack.shadow_batch_users,
    )


def train_config(cfg: ExperimentConfig, plan: DevicePlan) -> ConfigRecord:
    """The round's config as the devices receive it: the training keys and the device plan, nothing more."""
    return ConfigRecord({**TrainConfig.of(cfg.fl).to_config(), PLAN_KEY: plan.model_dump_json()})


@dataclass
class RunParts:
    """One run under one prior rule: its federation, model, store, sealer and measured utility."""

    cfg: ExperimentConfig
    rule: str
    fed: Federation
    model: torch.nn.Module
    keys: list[str]
    layout: RunLayout
    store: UpdateStore
    sealer: Sealer
    test: UserData
    device: torch.device
    plan: DevicePlan
    declarations: dict[str, Declaration]
    progress: Progress | None = None
    unsandboxed: str = ""  # why the local attack workers ran without the sandbox ('' = sandboxed, or remote)
    utility: dict[int, dict[str, float]] = field(default_factory=dict)
    timer: dict[str, float] = field(default_factory=dict)

    def evaluate(self, rnd: int, state: dict[str, torch.Tensor]) -> dict[str, float]:
        """Utility of the global model ``state`` after round ``rnd`` on the users' held-out data, on the cores the
        attack lanes leave free (``evaluation_threads``)."""
        self.model.load_state_dict(state)
        with torch_threads(evaluation_threads(self.cfg, self.device)):
            self.utility[rnd] = evaluate(self.model, self.test, self.fed.corpus.task, device=self.device)
        if self.progress:
            self.progress(rnd, self.utility[rnd])
        return self.utility[rnd]

    @property
    def out(self) -> Path:
        """Where this prior's scored metrics and figures go."""
        return self.layout.results(self.rule)

    def pool(self, names: list[str], on_fit: object = None) -> AttackPool:
        """The attack pool over this run's store, sized and bounded by ``[workers]``: one lane (sandbox) per attack of
        ``names`` and ``shadow_lanes`` for the shadow training; the store of this prior is ``<store root>/<run id>``,
        the only name a request carries. Lanes run sandboxed on this host (``workers.sandbox``), or on the remote
        workers of ``workers.addresses``, reached over mutual TLS when ``workers.tls_*`` name the files. Where the
        attack side stands goes to ``progress`` (``attack_progress``) each time it changes."""
        w = self.cfg.workers
        remote = bool(w.addresses)
        limits, self.unsandboxed = (None, "") if remote else limits_for(w)
        return AttackPool(
            knowledge(self.cfg, self.fed, self.keys),
            str(self.layout.store_root),
            declarations=self.declarations,
            params={n: dict(self.cfg.attack.params.get(n, {})) for n in names},
            outputs=self.layout.outputs(self.rule),
            count=w.count,
            queue_size=w.queue_size,
            submit_timeout=w.submit_timeout,
            addresses=w.addresses,
            retry_seconds=w.retry_seconds,
            run_id=self.layout.run_id(self.rule),
            on_fit=on_fit,  # type: ignore[arg-type]
            sandbox=limits,
            tls=tls_files(w) if remote else None,
            cuda=self.device.type == "cuda",
            log_dir=self.layout.logs(),
            task_deadline=w.task_deadline,
            drain_deadline=w.drain_deadline,
            max_result_mb=w.limits.result,
            log_mb=w.limits.log,
            shadow_lanes=shadow_lanes(self.cfg),
            shadow_shares=self.shadow_shares(),
            on_progress=self.attack_progress,
        )

    def shadow_shares(self) -> bool:
        """Whether the shadow lanes share every round (each a share of the known users) rather than take whole rounds:
        where that gives every user the same bits as a lone lane, the one-user loop (``attack.shadow_batch_users`` 0)
        or the batched path on a model without convolutions (``core.batched_training.stack_invariant``)."""
        return not self.cfg.attack.shadow_batch_users or stack_invariant(self.model)

    def attack_progress(self, figures: dict[str, int]) -> None:
        """The attack pool's figures (``AttackPool.progress``) to ``progress`` as ``attack_<figure>`` values, beside the
        last round the federation finished: the launcher shows the attack side's own progress, lag and fits."""
        if self.progress:
            self.progress(max(self.utility, default=0), {f"attack_{k}": float(v) for k, v in figures.items()})

    def fitted(self, pool: AttackPool, names: list[str]) -> list[str]:
        """Of ``names``, the attacks whose fit finished (a NaN fit time marks a failed fit)."""
        return [n for n in names if pool.stats.fitted(n)]

    def summary(self, pool: AttackPool) -> dict:
        """The part of ``metrics.json`` every loop writes the same way; how the attack side was confined comes first."""
        return {
            "attack_sandbox": attack_sandbox(pool, self.unsandboxed),
            "prior": self.rule,
            "time": self.fed.corpus.time,  # "row order": the data had no timestamps (report: chrono (row order))
            "users": len(self.fed.user_ids),
            "rounds": self.cfg.fl.rounds,
            "utility": {str(r): u for r, u in sorted(self.utility.items())},
            "pool": pool.stats.to_dict(),
            "fl_seconds": self.timer.get("fl", 0.0),
            "attack_fit_seconds": self.timer.get("attack_fit", 0.0),
            "attack_layers": self.keys,
            "defenses": [d.model_dump() for d in self.cfg.defenses],
            "defending_users": len(defending_users(self.cfg, self.fed.user_ids)),
            "attack_side": {
                "sandboxed": pool.sandboxed,
                "remote_workers": not pool.local,
                "received": received_fields(
                    [*TrainConfig.KEYS, "participants", *(["sampled"] if self.needs("participation") else [])],
                    self.needs("full_updates"),
                ),
            },
        }

    def needs(self, flag: str) -> bool:
        """Whether an attack of the suite declares the need ``flag`` (``core.declaration.Needs``)."""
        return needs_of(self.declarations, self.cfg.attack.suite, flag)

    def timed(self, name: str, fn: Callable[[], object]) -> None:
        """Run ``fn`` and keep its wall time under ``name`` (FL training, attack fitting)."""
        t0 = time.perf_counter()
        fn()
        self.timer[name] = time.perf_counter() - t0


def evaluation_threads(cfg: ExperimentConfig, device: torch.device) -> int:
    """Torch threads for the server's utility evaluation: the CPUs this process may use less one for each attack lane
    that may be training beside it on this host (``workers.count``; none for remote workers), at least one, never
    more than torch's own default.

    The evaluation runs after each round while the shadow lane trains the attacker's updates on the next: with torch's
    default (a thread per core) a thread shared a core with a lane, and every parallel region of the forward pass
    waited for it (on 2 cores the quickstart's evaluation took 0.11 s a round, plain Flower's, alone, 0.012 s). The
    results do not depend on the thread count (the same metrics, compared before and after)."""
    if device.type != "cpu":
        return torch.get_num_threads()
    lanes = 0 if cfg.workers.addresses else cfg.workers.count
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(torch.get_num_threads(), cpus - lanes))


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Torch's intra-op threads set to ``n`` inside the block, as they were after it."""
    before = torch.get_num_threads()
    if n == before:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def attack_sandbox(pool: AttackPool, unsandboxed: str) -> str:
    """One line: where the attack code ran and what confined it (the first line of the metrics and the report)."""
    if not pool.local:
        how = "mutual TLS" if pool.tls else "Unix sockets" if all(a.startswith("unix:") for a in pool.addresses) else "plaintext"
        return f"remote attack workers ({how}): one sandbox per attack on their own host or container"
    if pool.sandboxed:
        who = "a uid of its own" if os.geteuid() == 0 else "this user's uid"  # as root: a leased uid (workers.uids)
        return (f"sandboxed: bubblewrap, one sandbox per attack, {who} without capabilities, its own pid namespace, "
                "no network, seccomp, read-only inputs, resource limits and a disk quota")
    return f"NOT SANDBOXED ({unsandboxed}): attack code ran as this user, able to read the truth"


def prepare_run(
    cfg: ExperimentConfig, rule: str, layout: RunLayout, declarations: dict[str, Declaration], progress: Progress | None = None
) -> RunParts:
    """Seed, then build the run's parts under ``layout`` (refused if this prior's truth exists)."""
    layout.results(rule).mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    fed = federation(cfg, rule)
    model = build_model(cfg.model, fed.corpus)
    return RunParts(
        cfg=cfg,
        rule=rule,
        fed=fed,
        model=model,
        keys=attack_keys(model, cfg.model.attack_layers),
        layout=layout,
        store=UpdateStore(layout.store(rule)),
        sealer=Sealer(layout.referee(rule)),
        test=fed.test_set(),
        device=pick_device(cfg.device),
        plan=device_plan(cfg, rule, fed.user_ids, needs_of(declarations, cfg.attack.suite, "records")),
        declarations=declarations,
        progress=progress,
    )
