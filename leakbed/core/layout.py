"""Where a run's files live, and which of them the attack side may be given.

A run folder holds three separately owned trees:

* ``attack-store/<rule>/``: the attack side's inputs (anonymous updates, global models, its knowledge, the
  shadow updates), written by trusted code only. Each attack's sandbox gets its prior's store read-only and
  nothing else of the run (a volume of its own, read-only, in containers); an attack writes only a tmpfs of
  its own, and hands its outputs back through its lane's pipe.
* ``<rule>/outputs/``: each attack's outputs as trusted code checked and wrote them (what the referee scores).
* ``referee/<rule>/``: the sealed truth; written by the shuffler, read by the referee only. It is
  neither inside, beside (a sibling) nor above the store root.
* ``<rule>/`` and the top level: the frozen config, scored metrics, report and figures.

In containers the first two live in volumes of their own (``LEAKBED_ATTACK_STORE``,
``LEAKBED_REFEREE``: the store volume is the only one an attack worker mounts, the referee volume
only the ServerApp's); a run's stores are then ``<volume>/<run folder name>-<rule>``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

STORE_DIR = "attack-store"
OUTPUTS_DIR = "outputs"
REFEREE_DIR = "referee"
# ':' for an attack selected as ``distribution:name``, whose outputs are filed under that name
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,143}$")


def check_run_id(run_id: str) -> str:
    """A store folder name a request may carry: one path component, never ``..`` or a path."""
    if not _RUN_ID.fullmatch(run_id) or ".." in run_id:
        raise ValueError(f"bad run id {run_id!r}: 1-144 of [A-Za-z0-9._:-], starting alphanumeric")
    return run_id


@dataclass(frozen=True)
class RunLayout:
    root: Path
    store_base: Path | None = None  # a volume of the attack side's own (deployment)
    referee_base: Path | None = None  # a volume of the referee's own (deployment)

    @classmethod
    def from_env(cls, root: Path) -> RunLayout:
        """The layout with the volumes a container deployment sets (see the module docstring)."""
        store, referee = os.environ.get("LEAKBED_ATTACK_STORE"), os.environ.get("LEAKBED_REFEREE")
        return cls(root, Path(store) if store else None, Path(referee) if referee else None)

    @property
    def config(self) -> Path:
        return self.root / "config.toml"

    @property
    def store_root(self) -> Path:
        """What the attack workers are given: every prior's store, and nothing else of the run."""
        return self.store_base or self.root / STORE_DIR

    def run_id(self, rule: str) -> str:
        """The store's name under ``store_root``: the rule, prefixed by the run folder's name in a
        shared volume (several runs' stores side by side)."""
        if self.store_base is None:
            return check_run_id(rule)
        return check_run_id(f"{re.sub(r'[^A-Za-z0-9._-]', '_', self.root.name)[:40]}-{rule}")

    def store(self, rule: str) -> Path:
        return self.store_root / self.run_id(rule)

    def referee(self, rule: str) -> Path:
        if self.referee_base is not None:
            return self.referee_base / self.run_id(rule)
        return self.root / REFEREE_DIR / check_run_id(rule)

    def results(self, rule: str) -> Path:
        """Scored metrics, figures and analyses of one prior."""
        return self.root / check_run_id(rule)

    def outputs(self, rule: str) -> Path:
        """The attacks' outputs of one prior as trusted code checked and wrote them (``<name>.npz``), with the ids of
        the anonymous updates each fit was given (``<name>.given.npy``): what the referee scores."""
        return self.results(rule) / OUTPUTS_DIR

    def logs(self) -> Path:
        """The sandboxes' logs (what attack code printed, written by trusted code up to a cap)."""
        return self.root / "attack-logs"
