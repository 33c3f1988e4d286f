"""Records <-> protobuf messages of the attack service (``proto/attacks/service.proto``).

Arrays travel as numpy ``.npy`` bytes (exact dtype and shape, no pickle). The generated modules
``attacks/service_pb2*.py`` are build outputs of ``scripts/setup.sh``, not sources.
"""

from __future__ import annotations

import io
import json

import numpy as np

from attacks.records import AnonymousUpdate, RoundSnapshot

try:
    from attacks import service_pb2 as pb
    from attacks import service_pb2_grpc as pb_grpc
except ImportError as err:  # pragma: no cover - a fresh clone before the install step
    raise ImportError(
        "attacks/service_pb2.py is missing: run `bash scripts/setup.sh` (it compiles proto/attacks/service.proto)"
    ) from err

__all__ = ["GRPC_OPTIONS", "pb", "pb_grpc"]

# Round snapshots of large models and full-update batches exceed gRPC's 4 MiB default.
_MAX_MESSAGE = 1 << 30
GRPC_OPTIONS = [
    ("grpc.max_send_message_length", _MAX_MESSAGE),
    ("grpc.max_receive_message_length", _MAX_MESSAGE),
    # a restarted worker is found again within about a second, not after gRPC's default 120 s backoff
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


def to_npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
    return buf.getvalue()


def from_npy(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)


def to_tensors(arrays: dict[str, np.ndarray]) -> list[pb.Tensor]:
    return [pb.Tensor(name=k, npy=to_npy(v)) for k, v in arrays.items()]


def from_tensors(tensors: list[pb.Tensor]) -> dict[str, np.ndarray]:
    return {t.name: from_npy(t.npy) for t in tensors}


def run_msg(run_id: str) -> pb.Run:
    return pb.Run(run_id=run_id)


def round_request(run: pb.Run, snap: RoundSnapshot) -> pb.RoundRequest:
    return pb.RoundRequest(
        run=run, round=snap.round, arrays=to_tensors(snap.arrays), train_config_json=json.dumps(snap.train_config)
    )


def snapshot_of(req: pb.RoundRequest) -> RoundSnapshot:
    return RoundSnapshot(int(req.round), from_tensors(req.arrays), json.loads(req.train_config_json or "{}"))


def updates_request(run: pb.Run, batch_id: str, updates: list[AnonymousUpdate]) -> pb.UpdatesRequest:
    msgs = [
        pb.Update(
            update_id=u.update_id,
            round=u.round,
            vector=to_npy(u.vector),
            num_examples=u.num_examples,
            arrays=to_tensors(u.arrays) if u.arrays is not None else [],
            has_arrays=u.arrays is not None,
            norm=u.norm,
            sparsity=u.sparsity,
            nbytes=u.nbytes,
        )
        for u in updates
    ]
    return pb.UpdatesRequest(run=run, batch_id=batch_id, updates=msgs)


def updates_of(req: pb.UpdatesRequest) -> list[AnonymousUpdate]:
    return [
        AnonymousUpdate(
            m.update_id,
            int(m.round),
            from_npy(m.vector),
            int(m.num_examples),
            from_tensors(m.arrays) if m.has_arrays else None,
            float(m.norm),
            float(m.sparsity),
            int(m.nbytes),
        )
        for m in req.updates
    ]
