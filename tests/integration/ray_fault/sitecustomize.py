"""Fault injection for the start-up tests (``tests/integration/test_startup.py``). Put this folder
first on PYTHONPATH; every Python process started with that environment (``flwr run``'s SuperLink,
its SuperExec, ``flwr-simulation``, SuperNodes) imports it at start-up, and nothing else changes.

``LEAKBED_FAULT=no-raylet``: a process that starts Ray brings up Ray's GCS but never its raylet
(``Node.start_raylet`` does nothing), the start-up failure seen on busy machines. Ray then gives up
by its own code path, only sooner: its C++ wait for the node (``RAY_raylet_start_wait_time_s``, 30 s
by default) is set to ``RAYLET_WAIT_S``, and its Python wait in ``Node.__init__`` (a hard-coded 30 s)
reads a clock running ``FAST_CLOCK`` times fast, so Ray raises its own "timed out during startup"
error after a few seconds per start instead of about 32.
``LEAKBED_FAULT=silent-supernode``: ``flower-supernode`` stays alive but never connects (a device
that never appears)."""

import importlib.abc
import importlib.util
import os
import sys
import time
import types

FAST_CLOCK = 15.0  # Node.__init__'s 30 s raylet wait passes in 2 s of real time
RAYLET_WAIT_S = "2"  # each of its polls of the GCS (GlobalStateAccessor::GetNode) gives up after 2 s


def _command() -> str:
    with open("/proc/self/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode(errors="replace")


if os.environ.get("LEAKBED_FAULT") == "silent-supernode" and "bin/flower-supernode " in _command():
    while True:
        time.sleep(3600)


class _FastClock(types.ModuleType):
    """``time`` as ``ray._private.node`` sees it: ``monotonic`` runs ``FAST_CLOCK`` times fast (that
    module reads it only for the raylet wait); every other name is the real ``time`` module's."""

    def __init__(self) -> None:
        super().__init__("time")

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)

    @staticmethod
    def monotonic() -> float:
        return time.monotonic() * FAST_CLOCK


if os.environ.get("LEAKBED_FAULT") == "no-raylet":
    os.environ.setdefault("RAY_raylet_start_wait_time_s", RAYLET_WAIT_S)  # read by Ray's C++ config

    class _NoRaylet(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):  # noqa: ANN001, ANN201
            if name != "ray._private.node":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            run = spec.loader.exec_module

            def exec_module(module):  # noqa: ANN001, ANN202
                run(module)
                module.Node.start_raylet = lambda self, *args, **kwargs: None
                module.time = _FastClock()

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _NoRaylet())
