"""An attack's inputs as it sees them: a read-only view of the store trusted code wrote for its prior.

The view has no write method: an attack writes only its own folder (``AttackContext.folder``). In a sandbox the
store is also mounted read-only, so a path reached from ``root`` cannot be written either.
"""

from __future__ import annotations

from leakbed.core.store import StoreReader


class InputsView(StoreReader):
    """The anonymous updates, the rounds' global models and configs and the attacker's shadow updates of one prior.

    ``read_global(r)``: the global model the devices of round ``r`` received (the server's model before that
    round's updates). ``read_config(r)``: the training config the server sent with it. ``read_shadow()``: every
    shadow update so far, (vectors, identity labels, rounds), one per known user and round, computed by the
    attacker on its prior data with the round's global model. ``read_anon()``: every anonymous update so far,
    ``ids`` (opaque), ``vectors`` (the attack layers' Δw, flattened and L2-normalised), ``num_examples``, ``round``;
    ``read_anon_meta()``: what each report carried besides its weights (the whole Δw's L2 norm, its share of exact
    zeros, the reply's array bytes), in the same order; ``read_anon_full(r)``: ``{update id: {parameter: Δw}}`` of
    round ``r`` (only for an attack that declares ``Needs.full_updates``)."""
