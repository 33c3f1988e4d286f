"""Mutual TLS between the pool and remote attack workers: each side proves it holds a certificate of the run's CA.

A remote worker serves only clients that present a certificate the CA signed (the ServerApp's pool,
``leakbed/deploy/certs.sh``'s ``pool`` certificate), so nobody else can submit tasks to it or read from it;
the pool verifies the worker's certificate against the same CA.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

from leakbed.core.config import WorkersConfig


@dataclass(frozen=True)
class TlsFiles:
    """PEM files: the CA both sides trust, and this side's certificate and private key."""

    ca: Path
    cert: Path
    key: Path

    def read(self) -> tuple[bytes, bytes, bytes]:
        """``(ca, cert, key)`` bytes; OSError naming the file that cannot be read."""
        return self.ca.read_bytes(), self.cert.read_bytes(), self.key.read_bytes()


def server_credentials(files: TlsFiles) -> grpc.ServerCredentials:
    """A worker's side: present its certificate, require and verify the client's."""
    ca, cert, key = files.read()
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=True)


def channel_credentials(files: TlsFiles) -> grpc.ChannelCredentials:
    """The pool's side: verify the worker against the CA and present the pool's own certificate."""
    ca, cert, key = files.read()
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


def tls_files(workers: WorkersConfig) -> TlsFiles | None:
    """The pool's mutual-TLS files for remote workers (``workers.tls_*``); ValueError (one line) naming a missing one."""
    if not workers.tls_root_cert:
        return None
    for key in ("tls_root_cert", "tls_cert", "tls_key"):
        path = getattr(workers, key)
        if not Path(path).is_file():
            raise ValueError(f"workers.{key} = {path!r}: no such file (mutual TLS with the attack workers)")
    return TlsFiles(Path(workers.tls_root_cert), Path(workers.tls_cert), Path(workers.tls_key))
