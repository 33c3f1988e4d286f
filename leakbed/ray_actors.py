"""A ClientApp actor that dies is replaced, so one event does not silence the rest of a simulated run.

Flower 1.42's Ray backend keeps a pool of ``ClientAppActor`` actors and never replaces one: an actor killed by Ray's
memory monitor (or a crash) stays in the pool, and every message later given to it fails (seen: 171 of 200 replies of
a text run). Flower passes no actor options through its simulation config (no ``max_restarts``), so leakbed installs
this in the Simulation Runtime's process, where the ServerApp runs beside the backend: when a message fails because
its actor died, a fresh actor (made by the pool's own factory, with the same resources) takes the dead one's place.
The message itself still fails (its reply is counted failed, with the reason); the next ones are served.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from typing import Any

log = logging.getLogger(__name__)
_LOCK = threading.Lock()
REPLACED = {"count": 0}


# Ray 2.55's raylet names each process its memory monitor killed and the node's use (src/ray/raylet, strings of the
# binary): "... task name=X, required resources=..., pid=P, actual memory used=SGB, worker ID=..." and "Memory on the
# node (IP: ..., ID: ...) was UGB / TGB (...), which exceeds the memory usage threshold of ..."
KILLED = re.compile(r"task name=([^,]*),.*?pid=(\d+), actual memory used=([\d.]+)GB", re.S)
NODE = re.compile(r"was ([\d.]+)GB / ([\d.]+)GB")
MEMORY_KNOBS = "raise simulation.client_cpus (fewer ClientApp actors at once), or lower data.max_users or workers.count"


def memory_line(text: str, logs: str = "") -> str:
    """One line for Ray's (2,000-character) out-of-memory message: which process it killed, its size, the machine's
    use, the knob to turn and where Ray's log is; '' when ``text`` is no such message."""
    if "low on memory" not in text and "OutOfMemoryError" not in text:
        return ""
    killed, node = KILLED.search(text), NODE.search(text)
    what = f"{killed.group(1).strip() or 'a worker'} (pid {killed.group(2)}, {killed.group(3)} GB)" if killed else "a process"
    use = f" with the machine at {node.group(1)} of {node.group(2)} GB" if node else ""
    where = f"; Ray's log: {logs}/raylet.out" if logs else ""
    return f"Ray's memory monitor killed {what}{use}: {MEMORY_KNOBS}{where}"


def _ray_logs() -> str:
    """This process's Ray session log folder, or '' (Ray's private API: a hint, never an error)."""
    try:
        import ray._private.worker as rw

        return str(rw._global_node.get_logs_dir_path())  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - no Ray node here, or the private API moved
        return ""


def _actor_died(err: BaseException) -> str:
    """The one-line reason when ``err`` says the actor is gone (died, killed for memory, unavailable), else ''."""
    import ray.exceptions as rex

    if isinstance(err, rex.OutOfMemoryError | rex.ActorDiedError | rex.ActorUnavailableError | rex.RayActorError):
        if line := memory_line(f"{type(err).__name__}: {err}", _ray_logs()):
            return line
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        return f"{type(err).__name__}: {first[:200]}"
    return ""


def install() -> bool:
    """Patch Flower's actor pool in this process (once); False when this is no simulation process."""
    if "flwr.simulation.run_simulation" not in sys.modules:
        return False
    from flwr.simulation.ray_transport.ray_actor import BasicActorPool

    with _LOCK:
        if getattr(BasicActorPool, "_leakbed_replaces_dead_actors", False):
            return True
        original = BasicActorPool.fetch_result_and_return_actor_to_pool

        def fetch(self: Any, future: Any) -> Any:
            try:
                return original(self, future)
            except Exception as err:
                why = _actor_died(err)
                if why and future in self._future_to_actor:
                    self._future_to_actor[future] = self.create_actor_fn()  # the backend puts it back into the pool
                    REPLACED["count"] += 1
                    log.warning("a ClientApp actor died (%s); a new one took its place, its message failed", why)
                raise

        BasicActorPool.fetch_result_and_return_actor_to_pool = fetch
        BasicActorPool._leakbed_replaces_dead_actors = True
    return True
