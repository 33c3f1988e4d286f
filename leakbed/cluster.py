"""Joining an existing Ray cluster (``simulation.ray_address``): check the address before anything starts.

Ray's own ``ray.init(address=...)`` keeps retrying an unreachable head for minutes, printing
warnings; a wrong address must instead stop ``leakbed run`` and ``leakbed sweep`` at once with
one line and exit 2, like any other bad config. Two cheap probes decide it: a TCP connection to
the head's GCS port, then the standard gRPC health check that Ray's GCS server answers (a port
that answers TCP but is not a Ray head fails the second).
"""

from __future__ import annotations

import socket

from leakbed.core.config import ConfigError, ExperimentConfig

PROBE_SECONDS = 5.0  # each probe's limit: a reachable head answers in milliseconds
_HEALTH_CHECK = "/grpc.health.v1.Health/Check"
_SERVING = b"\x08\x01"  # HealthCheckResponse{status: SERVING}, protobuf wire format


def split_host_port(address: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` into its parts."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def ray_head_problem(address: str, timeout: float = PROBE_SECONDS) -> str | None:
    """Why ``address`` is not a reachable Ray head (GCS), or None when it is one."""
    import grpc

    host, port = split_host_port(address)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as err:
        return f"cannot reach it ({err.strerror or err})"
    channel = grpc.insecure_channel(address, options=[("grpc.enable_http_proxy", 0)])  # as Ray's own GCS client
    try:
        reply = channel.unary_unary(_HEALTH_CHECK)(b"", timeout=timeout)
    except grpc.RpcError as err:
        return f"it answers but is not a Ray head's GCS ({err.code().name})"
    finally:
        channel.close()
    if reply != _SERVING:
        return "its GCS reports it is not serving"
    return None


def check_ray_address(cfg: ExperimentConfig) -> None:
    """A one-line ConfigError when ``simulation.ray_address`` is set and no Ray head answers there."""
    address = cfg.simulation.ray_address
    if not address:
        return
    problem = ray_head_problem(address)
    if problem:
        raise ConfigError(
            f"simulation.ray_address = {address!r}: {problem}; start the head first "
            "(`ray start --head --port=PORT`) or leave it empty for a private local Ray"
        )
