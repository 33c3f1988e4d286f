"""A finished run's prior folder as the studies read it: frozen config, federation, update store, sealed truth,
the attacker's knowledge, and the re-attacks of the run's first re-identification attack (``studies.reattack``)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import torch

from leakbed.core.config import ExperimentConfig, load_config
from leakbed.core.data import Federation, UserData, federation
from leakbed.core.declaration import reid_names
from leakbed.core.errors import LeakbedError
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.layout import RunLayout
from leakbed.core.models import attack_keys, build_model
from leakbed.core.store import UpdateStore
from leakbed.core.training import TrainConfig, load_arrays, local_update, state_arrays
from leakbed.referee.truth import Referee
from leakbed.studies.pools import declarations_of
from leakbed.studies.reattack import ReAttack


@dataclass
class RunView:
    run_dir: Path
    rule: str
    cfg: ExperimentConfig

    @classmethod
    def open(cls, run_dir: str | Path, rule: str | None = None) -> RunView:
        """The run at ``run_dir`` (the folder holding config.toml); ``rule`` picks the prior (default: the first run)."""
        run_dir = Path(run_dir)
        if not (run_dir / "config.toml").exists():
            raise LeakbedError(f"{run_dir}: not a finished run (no config.toml)")
        cfg = load_config(run_dir / "config.toml")
        rules = [r for r in cfg.split.priors if (RunLayout(run_dir).store(r) / "global").is_dir()]
        if not rules:
            raise LeakbedError(f"{run_dir}: no prior folder with an update store")
        if rule is not None and rule not in rules:
            raise LeakbedError(f"{run_dir}: no {rule!r} prior run (have {', '.join(rules)})")
        return cls(run_dir, rule or rules[0], cfg)

    @property
    def prior_dir(self) -> Path:
        return self.run_dir / self.rule

    @cached_property
    def store(self) -> UpdateStore:
        return UpdateStore(RunLayout(self.run_dir).store(self.rule))

    @cached_property
    def fed(self) -> Federation:
        return federation(self.cfg, self.rule)

    @cached_property
    def truth(self) -> dict[str, str]:
        """update id -> user id, from the referee's sealed file."""
        return {r["update_id"]: r["user_id"] for r in Referee.load(RunLayout(self.run_dir).referee(self.rule)).records()}

    @cached_property
    def rounds(self) -> list[int]:
        return sorted(int(f.stem[1:]) for f in (self.store.root / "global").glob("r*.npz"))

    @cached_property
    def train_config(self) -> TrainConfig:
        return TrainConfig.of(self.cfg.fl)

    @cached_property
    def knowledge(self) -> AttackerKnowledge:
        """What the run's attack side knew (its prior data, settings and seed), as the run filed it."""
        return AttackerKnowledge.load(self.store.root)

    @property
    def attacker(self) -> str:
        """The run's first closed-world re-identification attack: the one the studies re-fit."""
        names = reid_names(declarations_of(self.cfg, self.cfg.attack.suite), self.cfg.attack.suite)
        if not names:
            raise LeakbedError(f"{self.run_dir}: the run's attack.suite has no re-identification attack (mlp, svm, knn...)")
        return names[0]

    def reattack(self, study: str) -> ReAttack:
        """A fresh study folder (``<run>/studies/<study>-<prior>``) whose variants the run's attacker re-fits in the sandbox."""
        return ReAttack.fresh(self.cfg, self.knowledge, self.run_dir / "studies" / f"{study}-{self.rule}", self.attacker)

    def model(self) -> torch.nn.Module:
        return build_model(self.cfg.model, self.fed.corpus)

    def keys(self) -> list[str]:
        return attack_keys(self.model(), self.cfg.model.attack_layers)

    def anon(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(vectors, owners, rounds) of the run's anonymous updates, owners from the sealed truth."""
        a = self.store.read_anon()
        return a["vectors"], np.asarray([self.truth[str(i)] for i in a["ids"]]), a["round"]

    def replay(self, data: UserData, rnd: int, tag: str) -> dict[str, np.ndarray]:
        """Full Δw = w_global − w_local of one DeviceUpdate on ``data`` from round ``rnd``'s global model."""
        model = self.model()
        glob = self.store.read_global(rnd)
        load_arrays(model, glob)
        seed = zlib.crc32(f"{self.cfg.seed}/{rnd}/{tag}/analysis".encode())
        torch.manual_seed(seed)
        local_update(model, data, self.fed.corpus.task, self.train_config, seed=seed, device=torch.device("cpu"))
        after = state_arrays(model)
        return {k: glob[k] - after[k] for k in glob if np.asarray(glob[k]).dtype.kind == "f"}


def flat(delta: dict[str, np.ndarray], keys: list[str]) -> np.ndarray:
    """Δw over ``keys``, flattened and L2-normalised (the seeds' update representation)."""
    vec = np.concatenate([np.asarray(delta[k], np.float64).ravel() for k in keys])
    norm = np.linalg.norm(vec)
    return (vec / norm if norm > 0 else vec).astype(np.float32)

