"""Attacks on anonymous updates. Knows nothing of Flower; sees no ground truth.

The server reaches this package only through the pool's interface below.
"""

from attacks.knowledge import AttackerKnowledge
from attacks.pool import AttackPool, Fit, PoolStats
from attacks.records import AnonymousUpdate, RoundSnapshot

__all__ = ["AnonymousUpdate", "AttackPool", "AttackerKnowledge", "Fit", "PoolStats", "RoundSnapshot"]
