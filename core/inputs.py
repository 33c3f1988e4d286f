"""An attack's inputs as it sees them: a read-only view of the store trusted code wrote for its prior.

The view has no write method: an attack writes only its own folder (``AttackContext.folder``). In a sandbox the
store is also mounted read-only, so a path reached from ``root`` cannot be written either.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from core.store import UpdateStore


class InputsView:
    """The anonymous updates, the round's global models and configs and the attacker's shadow updates of one prior."""

    def __init__(self, root: str | Path) -> None:
        self._store = UpdateStore(root)

    @property
    def root(self) -> Path:
        """The inputs folder (read-only)."""
        return self._store.root

    def read_global(self, rnd: int) -> dict[str, np.ndarray]:
        """The global model the devices of round ``rnd`` received (the server's model before that round's updates)."""
        return self._store.read_global(rnd)

    def global_rounds(self) -> list[int]:
        """The rounds whose global model has arrived."""
        return self._store.global_rounds()

    def read_config(self, rnd: int) -> dict:
        """The training config the server sent with round ``rnd`` (epochs, batch size, learning rate...)."""
        return self._store.read_config(rnd)

    def read_shadow(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every shadow update so far: (vectors, identity labels, rounds); one per known user and round, computed by
        the attacker on its prior data with the round's global model."""
        return self._store.read_shadow()

    def shadow_rounds(self) -> list[int]:
        return self._store.shadow_rounds()

    def read_anon(self) -> dict[str, np.ndarray]:
        """Every anonymous update so far: ``ids`` (opaque), ``vectors`` (the attack layers' Δw, flattened and
        L2-normalised), ``num_examples``, ``round``."""
        return self._store.read_anon()

    def read_anon_meta(self, names: tuple[str, ...] = ("norm", "sparsity", "nbytes")) -> dict[str, np.ndarray]:
        """What each report carried besides its weights, in ``read_anon`` order: the whole Δw's L2 norm, its share of
        exact zeros, the reply's array bytes."""
        return self._store.read_anon_meta(names)

    def read_anon_full(self, rnd: int) -> dict[str, dict[str, np.ndarray]]:
        """``{update_id: {parameter: Δw}}`` of round ``rnd`` (only when the attack declares ``Needs.full_updates``)."""
        return self._store.read_anon_full(rnd)

    def anon_full_rounds(self) -> list[int]:
        """The rounds with full updates."""
        return self._store.anon_full_rounds()
