"""TLS on every gRPC port: what a client needs to reach one, what a server needs to serve one.

A client gives :class:`Tls` (the CA that signed the servers' certificates, and for mutual TLS
its own certificate and key) to any of our clients, or sets ``TUBEQ_TLS_CA`` (+
``TUBEQ_TLS_CERT``/``TUBEQ_TLS_KEY``) so that every client of the process uses it. A server
takes ``tls_cert``/``tls_key`` (its certificate), ``tls_ca`` (the CA its peers' and clients'
certificates must chain to) and ``tls_client_auth`` (mutual TLS: every client must present a
certificate the CA signed). Brokers and masters are also each other's clients: they reach
their peers with the same CA, and with mutual TLS they present their own certificate.
"""
from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

import grpc

from lib.errors import ConfigError

TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV = "TUBEQ_TLS_CA", "TUBEQ_TLS_CERT", "TUBEQ_TLS_KEY"
TLS_ENV = "TUBEQ_TLS"  # "1": TLS with the system's CAs (no TUBEQ_TLS_CA)
MAX_PEM_BYTES = 1 << 20


def read_pem(path: str, what: str) -> bytes:
    """A PEM file's bytes; ConfigError naming the file and what it was for."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_PEM_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{what} {path}: {exc.strerror}") from None
    if len(data) > MAX_PEM_BYTES or b"-----BEGIN " not in data:
        raise ConfigError(f"{what} {path} is not a PEM file (at most {MAX_PEM_BYTES} bytes)")
    return data


@dataclass(frozen=True)
class Tls:
    """How a client reaches TLS ports: ``ca`` (PEM file; "" for the system's CAs) and, for
    mutual TLS, ``cert`` + ``key`` (PEM files) of the client's own certificate."""

    ca: str = ""
    cert: str = ""
    key: str = ""

    def __post_init__(self) -> None:
        if bool(self.cert) != bool(self.key):
            raise ConfigError("TLS: a client certificate needs its key (and a key its "
                              "certificate)")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Tls | None:
        """From TUBEQ_TLS_CA (+ TUBEQ_TLS_CERT, TUBEQ_TLS_KEY), or TUBEQ_TLS=1 for the
        system's CAs; None: plaintext."""
        env = os.environ if env is None else env
        ca, cert, key = (env.get(v, "") for v in (TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV))
        if not (ca or cert or env.get(TLS_ENV, "") in ("1", "true", "yes")):
            return None
        return cls(ca, cert, key)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=read_pem(self.ca, "TLS CA file") if self.ca else None,
            private_key=read_pem(self.key, "TLS key file") if self.key else None,
            certificate_chain=read_pem(self.cert, "TLS certificate file") if self.cert else None)


def resolve(tls: Tls | None) -> Tls | None:
    """A client's TLS: the one it was given, else the environment's."""
    return tls if tls is not None else Tls.from_env()


@dataclass(frozen=True)
class ServerTls:
    """A server's TLS settings, as its config gives them (all "" / False: plaintext)."""

    cert: str = ""
    key: str = ""
    ca: str = ""
    client_auth: bool = False

    @property
    def enabled(self) -> bool:
        return bool(self.cert)

    def problem(self, component: str) -> str:
        """What is wrong with these settings ('' if nothing); files are read at start."""
        if bool(self.cert) != bool(self.key):
            return f"{component}: tls_cert and tls_key go together"
        if self.client_auth and not (self.cert and self.ca):
            return (f"{component}: tls_client_auth needs tls_cert, tls_key and tls_ca (the CA "
                    "that signs the clients' certificates)")
        if self.ca and not self.cert:
            return f"{component}: tls_ca without tls_cert: set tls_cert and tls_key for TLS"
        return ""

    def server_credentials(self) -> grpc.ServerCredentials:
        pair = (read_pem(self.key, "tls_key"), read_pem(self.cert, "tls_cert"))
        return grpc.ssl_server_credentials(
            [pair], root_certificates=read_pem(self.ca, "tls_ca") if self.ca else None,
            require_client_auth=self.client_auth)

    def ssl_context(self) -> ssl.SSLContext | None:
        """The same certificate for a plain socket server (the broker's Kafka port); None
        without TLS."""
        if not self.enabled:
            return None
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.cert, self.key)
        if self.client_auth:
            ctx.load_verify_locations(self.ca)
            ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    def as_client(self) -> Tls | None:
        """How this server reaches its peers: the same CA; its own certificate under mutual
        TLS. None: plaintext."""
        if not self.enabled:
            return None
        return Tls(self.ca, self.cert, self.key) if self.client_auth else Tls(self.ca)

    def bind(self, server, address: str) -> int:
        """Listen on ``address`` with TLS or without; the bound port (0: could not bind)."""
        if self.enabled:
            return server.add_secure_port(address, self.server_credentials())
        return server.add_insecure_port(address)


def server_tls(config) -> ServerTls:
    """The ServerTls of a master or broker config (their tls_* keys)."""
    return ServerTls(config.tls_cert, config.tls_key, config.tls_ca, config.tls_client_auth)


def add_server_args(parser) -> None:
    """The TLS options of ``python -m master`` and ``python -m broker``."""
    parser.add_argument("--tls-cert", dest="tls_cert", help="PEM certificate: serve TLS")
    parser.add_argument("--tls-key", dest="tls_key", help="PEM key of --tls-cert")
    parser.add_argument("--tls-ca", dest="tls_ca", help="PEM CA that peers' and clients' "
                                                        "certificates chain to")
    parser.add_argument("--tls-client-auth", dest="tls_client_auth", action="store_true",
                        default=None, help="mutual TLS: every client presents a certificate")


def server_overrides(args) -> dict[str, object]:
    """The config overrides those options give (None: not given)."""
    return {k: getattr(args, k) for k in ("tls_cert", "tls_key", "tls_ca", "tls_client_auth")}
