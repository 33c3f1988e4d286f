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
import sys
import threading
from typing import Any

log = logging.getLogger(__name__)
_LOCK = threading.Lock()
REPLACED = {"count": 0}


def _actor_died(err: BaseException) -> str:
    """The one-line reason when ``err`` says the actor is gone (died, killed for memory, unavailable), else ''."""
    import ray.exceptions as rex

    if isinstance(err, rex.OutOfMemoryError | rex.ActorDiedError | rex.ActorUnavailableError | rex.RayActorError):
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
