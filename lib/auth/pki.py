"""A private CA for a local cluster: what ``tubeq cluster up --tls`` generates.

One CA (10 years), one certificate for every server of the cluster (its hosts as subject
alternative names, usable as server and as client: brokers and masters call each other), and
one client certificate for the admin (mutual TLS: CN is the principal, O entries its roles, as
Kubernetes reads them). ECDSA P-256 keys: small, and fast to sign and check. Keys are written
0600. A production cluster brings its own certificates (docs/security.md, "TLS").
"""
from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from lib.private_files import write_private

CA_DAYS, CERT_DAYS = 3650, 825


@dataclass(frozen=True)
class LocalPki:
    """The files of a local cluster's PKI, under one directory."""

    root: Path
    ca: Path = field(init=False)
    ca_key: Path = field(init=False)
    server_cert: Path = field(init=False)
    server_key: Path = field(init=False)
    admin_cert: Path = field(init=False)
    admin_key: Path = field(init=False)

    def __post_init__(self) -> None:
        files = {"ca": "ca.pem", "ca_key": "ca.key", "server_cert": "server.pem",
                 "server_key": "server.key", "admin_cert": "admin.pem", "admin_key": "admin.key"}
        for name, file in files.items():
            object.__setattr__(self, name, self.root / file)

    def server_args(self, client_auth: bool = False) -> list[str]:
        """The options of ``python -m master`` / ``python -m broker`` that serve TLS with the
        server certificate (``client_auth``: mutual TLS)."""
        return ["--tls-cert", str(self.server_cert), "--tls-key", str(self.server_key),
                "--tls-ca", str(self.ca), *(["--tls-client-auth"] if client_auth else [])]

    def ensure(self, hosts: Iterable[str]) -> LocalPki:
        """Make what is missing: the CA once, then certificates signed by it (a server
        certificate that does not name every host is made again)."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        hosts = sorted({"127.0.0.1", "localhost", *hosts})
        if not (self.ca.exists() and self.ca_key.exists()):
            cert, key = make_ca("tubeq local CA")
            write_private(self.ca_key, key, 0o600)
            write_private(self.ca, cert, 0o644)
            for stale in (self.server_cert, self.admin_cert):
                stale.unlink(missing_ok=True)
        ca_cert, ca_key = self.ca.read_bytes(), self.ca_key.read_bytes()
        if not self.server_cert.exists() or not _names_all(self.server_cert, hosts):
            cert, key = issue(ca_cert, ca_key, "tubeq server", hosts=hosts)
            write_private(self.server_key, key, 0o600)
            write_private(self.server_cert, cert, 0o644)
        if not self.admin_cert.exists():
            cert, key = issue(ca_cert, ca_key, "admin", roles=("admin",))
            write_private(self.admin_key, key, 0o600)
            write_private(self.admin_cert, cert, 0o644)
        return self


def make_ca(name: str) -> tuple[bytes, bytes]:
    """(certificate, key) PEM of a new self-signed CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (_builder(subject, subject, key.public_key(), CA_DAYS)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False,
                                         False), critical=True)
            .sign(key, hashes.SHA256()))
    return _pem(cert, key)


def issue(ca_cert_pem: bytes, ca_key_pem: bytes, common_name: str, hosts: Iterable[str] = (),
          roles: Iterable[str] = ()) -> tuple[bytes, bytes]:
    """(certificate, key) PEM signed by the CA: CN ``common_name``, one O per role, the hosts
    (names or IP addresses) as subject alternative names; good for server and client auth."""
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                         *(x509.NameAttribute(NameOID.ORGANIZATION_NAME, r) for r in roles)])
    builder = (_builder(subject, ca_cert.subject, key.public_key(), CERT_DAYS)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                     ExtendedKeyUsageOID.CLIENT_AUTH]),
                              critical=False))
    names = [_san(h) for h in hosts]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return _pem(builder.sign(ca_key, hashes.SHA256()), key)


def _builder(subject: x509.Name, issuer: x509.Name, public_key, days: int
             ) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days)))


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _names_all(cert_path: Path, hosts: list[str]) -> bool:
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    have = {str(v) for v in san.get_values_for_type(x509.IPAddress)}
    have |= set(san.get_values_for_type(x509.DNSName))
    return set(hosts) <= have


def _pem(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> tuple[bytes, bytes]:
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


