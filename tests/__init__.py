"""The test suite. Runs before conftest's imports: gRPC reads GRPC_ENABLE_FORK_SUPPORT when first imported
(conftest imports flwr, which imports grpc), and with fork support on, Ray's raylet start-up forks were
seen to hang until Ray's 30 s start-up limit in the test process (see leakbed/__init__.py)."""

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
