"""Fault injection for the start-up tests (``tests/integration/test_startup.py``). Put this folder
first on PYTHONPATH; every Python process started with that environment (``flwr run``'s SuperLink,
its SuperExec, ``flwr-simulation``, SuperNodes) imports it at start-up, and nothing else changes.

``LEAKBED_FAULT=no-raylet``: a process that starts Ray brings up Ray's GCS but never its raylet
(``Node.start_raylet`` does nothing), the start-up failure seen on busy machines.
``LEAKBED_FAULT=silent-supernode``: ``flower-supernode`` stays alive but never connects (a device
that never appears)."""

import importlib.abc
import importlib.util
import os
import sys
import time


def _command() -> str:
    with open("/proc/self/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode(errors="replace")


if os.environ.get("LEAKBED_FAULT") == "silent-supernode" and "bin/flower-supernode " in _command():
    while True:
        time.sleep(3600)

if os.environ.get("LEAKBED_FAULT") == "no-raylet":

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

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _NoRaylet())
