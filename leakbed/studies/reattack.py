"""A study's re-attacks: the run's own attack code, fitted in sandboxed attack workers, scored here.

A study varies what an attack is trained or tested on (other layers, fewer prior examples, other rounds,
another share of seen users). It writes each variant as a store of its own, holding only what the attack
side may hold: the attacker's knowledge, shadow updates labelled by identity and test updates under opaque
ids. It then asks an ``AttackPool`` (sandboxed local workers, as a run's) to fit and predict every variant,
and joins the outputs with the owners it kept on this side. The attack code never runs in the process that
holds the owners, and the owners never reach a store. The join is the referee's (``referee.coverage``): every test
update and every known user is scored, a row the attack left out is the referee's random ranking and a user it left
out counts at chance; the rounds are this side's.
"""

from __future__ import annotations

import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from leakbed.core.config import ExperimentConfig
from leakbed.core.errors import Failed
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.layout import check_run_id
from leakbed.core.reid_metrics import reid_metrics
from leakbed.core.store import UpdateStore
from leakbed.referee.coverage import ClassCoverage, Coverage, fill_rng, finite_rows
from leakbed.studies.pools import study_pool
from leakbed.workers import Fit


@dataclass
class Outputs:
    """One variant's predictions joined with the truth kept on this side: owner and round of each test update."""

    owners: np.ndarray
    rounds: np.ndarray
    classes: np.ndarray
    scores: np.ndarray
    filled: np.ndarray | None = None  # rows the referee drew (the attack returned none): their top-k counts at chance

    def metrics(self, select: np.ndarray | None = None) -> dict:
        """Closed-world metrics (seed 001 §6) over all test updates, or the selected ones."""
        filled = np.zeros(len(self.owners), bool) if self.filled is None else self.filled
        if select is None:
            return reid_metrics(self.owners, self.classes, self.scores, filled)
        return reid_metrics(self.owners[select], self.classes, self.scores[select], filled[select])


@dataclass
class ReAttack:
    """Variants of re-identification to fit, each a store under ``root``; ``run`` fits them all at once."""

    cfg: ExperimentConfig
    knowledge: AttackerKnowledge
    root: Path
    attack: str  # the re-identification attack every variant fits (the run's first)
    _owners: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)

    @classmethod
    def fresh(cls, cfg: ExperimentConfig, knowledge: AttackerKnowledge, root: Path, attack: str) -> ReAttack:
        """A study folder of its own (an old one is replaced: a study is re-run whole)."""
        shutil.rmtree(root, ignore_errors=True)
        (root / "store").mkdir(parents=True)
        return cls(cfg, knowledge, root, attack)

    def add(
        self,
        variant: str,
        x_train: np.ndarray,
        y_train: np.ndarray,
        x_test: np.ndarray,
        owners: np.ndarray,
        rounds: np.ndarray | None = None,
    ) -> None:
        """One variant: shadow updates ``x_train`` labelled ``y_train``, test updates ``x_test`` of ``owners``."""
        store = UpdateStore(self.root / "store" / check_run_id(variant))
        self.knowledge.save(store.root)
        store.write_shadow(0, list(y_train), np.asarray(x_train, np.float32))
        rounds = np.zeros(len(x_test), np.int64) if rounds is None else np.asarray(rounds, np.int64)
        ids = np.asarray([secrets.token_hex(8) for _ in range(len(x_test))])
        x_test = np.asarray(x_test, np.float32)
        for rnd in np.unique(rounds):
            sel = rounds == rnd
            store.write_anon(int(rnd), "study", list(ids[sel]), x_test[sel], np.ones(int(sel.sum()), np.int64))
        self._owners[variant] = (ids, np.asarray(owners), rounds)

    def run(self) -> dict[str, Outputs]:
        """Fit every variant in sandboxed workers; each variant's outputs with its owners."""
        pool = study_pool(self.cfg, self.knowledge, self.root, [self.attack], run_id="knowledge")
        jobs = {v: Fit(self.attack, store=v) for v in self._owners}
        try:
            pool.fit(list(jobs.values()))
        finally:
            pool.close()
        failed = [v for v in self._owners if not pool.stats.fitted(f"{v}:{self.attack}")]
        if failed:
            raise Failed(f"the {self.attack} fit of variant {failed[0]} failed: {'; '.join(pool.stats.errors[-2:])}", "analysis")
        return {v: self._outputs(v, pool.read_output(job)) for v, job in jobs.items()}

    def _outputs(self, variant: str, pred: dict[str, np.ndarray]) -> Outputs:
        """Every test update of the variant and every known user, as the referee joins a run's outputs."""
        ids, owners, rounds = self._owners[variant]
        held = ClassCoverage(list(self.knowledge.prior), pred["classes"])
        kept = held.kept(pred["scores"])
        rng = fill_rng(self.cfg.seed, "reid", f"{self.attack}/{variant}")
        cov = Coverage(ids, pred["ids"], rng=rng, finite=finite_rows(len(pred["ids"]), [kept]))
        return Outputs(owners, rounds, held.classes, held.widen(cov.scores(kept)), cov.filled)
