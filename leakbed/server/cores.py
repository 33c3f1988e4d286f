"""The cores of this host and how the attack side's share of them is spent: lanes of one torch thread each.

The federation's ClientApp actors take this host's CPUs (one actor per ``simulation.client_cpus``); the attack side
may keep ``workers.count`` lane tasks busy at once (``workers.pool``), and the ServerApp's evaluation takes the rest
(``server.run_parts.evaluation_threads``). The shadow training, which the attack side repeats every round for every
known user, is spread over ``shadow_lanes`` lanes so it keeps up with the rounds on those cores.
"""

from __future__ import annotations

import os

from leakbed.core.config import ExperimentConfig


def host_cpus() -> int:
    """The CPUs this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def shadow_lanes(cfg: ExperimentConfig, cpus: int | None = None) -> int:
    """Lanes per prior for the attacker's shadow training: ``workers.shadow_lanes``, or (0) one per attack task that may
    run at once (``workers.count``), at most the CPUs of this host (``cpus``, default ``host_cpus``; remote workers:
    ``workers.count``).

    Each lane is a process of one torch thread (``workers.lane``) that trains its share of every round's known users
    (``attacks.shadow.share_of``, each user as the whole set trains it): the shadow training runs on as many cores as
    the attack side may use at once, never more (the pool runs at most ``workers.count`` lane tasks at once), and a
    round's shadow updates are ready in about 1/n of one lane's time. Processes, not threads in one lane: threads that
    wait for each other on cores the federation holds are slow (``benchmarks.shadow`` on 2 busy cores: the LSTM
    language model's round took 4x as long on 2 threads as on 1; benchmarks/README.md), and their split of each
    floating-point reduction would change every update's last bits with the thread count."""
    w = cfg.workers
    if w.shadow_lanes:
        return w.shadow_lanes
    return w.count if w.addresses else max(1, min(w.count, cpus or host_cpus()))
