"""The gRPC plumbing between the pool and remote attack workers (``proto/leakbed/workers/service.proto``).

The generated modules ``service_pb2*.py`` are committed and shipped in the wheel (a test regenerates them). No array
travels here but a lane's replies and the upstream outputs it is handed: a remote worker reads its inputs from the
store trusted code wrote (a volume it mounts read-only).
"""

from __future__ import annotations

from leakbed.workers import service_pb2 as pb
from leakbed.workers import service_pb2_grpc as pb_grpc

__all__ = ["GRPC_OPTIONS", "pb", "pb_grpc", "run_msg"]

_MAX_MESSAGE = 1 << 30
GRPC_OPTIONS = [
    ("grpc.max_send_message_length", _MAX_MESSAGE),
    ("grpc.max_receive_message_length", _MAX_MESSAGE),
    # a restarted worker is found again within about a second, not after gRPC's default 120 s backoff
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


def run_msg(run_id: str) -> pb.Run:
    return pb.Run(run_id=run_id)
