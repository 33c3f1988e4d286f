"""Shared fixtures: tiny, fast experiment configs and fake Flower messages."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, Error, Message, Metadata, RecordDict

from core.config import ExperimentConfig, build_config

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def tiny_config(*overrides: str) -> ExperimentConfig:
    """A few small synthetic users; enough for unit tests to train and attack in seconds."""
    base = [
        "data.synthetic.users=6",
        "data.synthetic.examples_per_user=40",
        "data.synthetic.image_size=8",
        "fl.rounds=2",
        "fl.fraction_train=0.5",
        "attack.workers=1",
        "attack.mlp_epochs=50",
    ]
    return build_config({}, [*base, *overrides])


@pytest.fixture(autouse=True)
def _no_ray_outside_slow(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep ``pytest -m "not slow"`` a fast inner loop: a test that starts a Ray simulation must be
    marked ``slow``, and one that is not fails at once here instead of quietly taking minutes."""
    if request.node.get_closest_marker("slow"):
        return

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"{request.node.nodeid} starts Ray but is not marked @pytest.mark.slow")

    monkeypatch.setattr("flwr.simulation.run_simulation", refuse)
    monkeypatch.setattr("ray.init", refuse)


@pytest.fixture
def tiny_cfg() -> ExperimentConfig:
    return tiny_config()


def fake_message(
    content: RecordDict | None, *, src: int = 11, dst: int = 0, message_type: str = "train", error: str = ""
) -> Message:
    """A message as if it had crossed the SuperLink (metadata filled in); ``error`` makes a failed reply."""
    meta = Metadata(
        run_id=1,
        message_id=f"m{src}-{dst}",
        src_node_id=src,
        dst_node_id=dst,
        reply_to_message_id="i",
        group_id="1",
        created_at=time.time(),
        ttl=60,
        message_type=message_type,
    )
    if error:
        return Message(error=Error(code=0, reason=error), metadata=meta)
    return Message(content=content, metadata=meta)


def arrays_of(arrays: dict[str, np.ndarray]) -> ArrayRecord:
    """An ArrayRecord keyed like a state_dict."""
    return ArrayRecord(torch_state_dict={k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()})
