"""How untrusted attack code runs: the pool (server side), the sandbox, the lane processes and their channel,
the introspection that turns a plugin into a declaration, the scoring sandbox, remote workers and their TLS.

The trusted half imports no attack module; only ``workers.inside`` (run inside a sandbox) does.
"""

from leakbed.workers.pool import AttackPool, Fit, PoolStats

__all__ = ["AttackPool", "Fit", "PoolStats"]
