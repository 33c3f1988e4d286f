"""leakbed, the product: the CLI, simulate, sweep, deploy-local, compose rendering and the report.

It stands on ``core`` (the ground) and wires the rooms together: ``server``, ``client``,
``defenses``, ``attacks`` and ``referee``. Nothing below imports it.
"""

import leakbed.core  # noqa: F401  (sets GRPC_ENABLE_FORK_SUPPORT before anything imports grpc)
