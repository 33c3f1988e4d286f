"""Attacks on anonymous updates. Knows nothing of Flower; sees no ground truth.

The server reaches this package only through the pool's interface below.
"""

from attacks.knowledge import AttackerKnowledge
from attacks.pool import AttackPool, PoolStats
from attacks.records import AnonymousUpdate, RoundSnapshot
from attacks.suite import needs_full_updates

__all__ = ["AnonymousUpdate", "AttackPool", "AttackerKnowledge", "PoolStats", "RoundSnapshot", "needs_full_updates"]
