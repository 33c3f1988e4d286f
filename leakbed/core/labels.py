"""Class labels that an attack's outputs and the referee's scoring share."""

from __future__ import annotations

UNSEEN = "<unseen>"  # open world (seed 001 §6.1.2): the class of every user whose prior the attacker does not hold
