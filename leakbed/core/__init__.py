"""The ground every room stands on: config, per-user data, models, local training, Δw vectors,
the update store, telemetry, privacy accounting. It imports nothing of ours."""

import os

# Ray forks its GCS and raylet (with a preexec hook) while the attack pool's gRPC channels are busy
# in the same process; gRPC's fork handlers are not needed (every child of ours execs afresh) and
# are kept out of those forks. Must be set before grpc is first imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
