"""The local stack's TLS certificates: a certificate authority of the stack's own, the server certificate it signs
(which the broker's TLS listeners and the registry's HTTPS port present) and a client certificate (for the broker's
mutual TLS listener), as a self-managed cluster's private CA would sign them. Amazon MSK's server certificates are
publicly trusted, so its clients need no CA of their own; a private CA's goes in the Kafka secret's ``ca_pem``
(``kafkalake.kafka_access``).

Made once under the stack's state folder (``stack_tls``) and read back after: an EC P-256 key each, the server
certificate for 127.0.0.1 and localhost (every client checks the name: librdkafka's and Java's
``ssl.endpoint.identification.algorithm`` is https by default, and so is Python's), valid for ten years.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = datetime.timedelta(days=3650)
CLIENT = "kafkalake"
"""The client certificate's common name: the broker's principal for it is ``User:CN=kafkalake``."""


@dataclass(frozen=True)
class StackTls:
    ca: Path
    """The CA's certificate (PEM): what a client trusts."""
    key: Path
    """The server's private key (PKCS#8, PEM)."""
    chain: Path
    """The server's certificate and the CA's (PEM), as the registry's HTTPS port presents them."""
    keystore: Path
    """The key and the chain in one file, as Kafka's PEM keystore reads them."""
    client_key: Path
    """A client's private key (PKCS#8, PEM), for the broker's mutual TLS listener."""
    client_chain: Path
    """That client's certificate (CN=``CLIENT``) and the CA's (PEM)."""

    def ca_pem(self) -> str:
        return self.ca.read_text()


def stack_tls(folder: Path) -> StackTls:
    """The stack's CA, server and client certificates under ``folder``, made on first use (all again when one is
    missing)."""
    found = StackTls(
        *(folder / name for name in ("ca.pem", "server-key.pem", "server-chain.pem", "keystore.pem")),
        *(folder / name for name in ("client-key.pem", "client-chain.pem")),
    )
    if all(path.exists() for path in vars(found).values()):
        return found
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("kafkalake local CA")
    ca = (
        _builder(ca_name, ca_name, ca_key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(cert_sign=True), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    server_key, server = _signed(
        ca, ca_key, now, common_name="127.0.0.1", usage=ExtendedKeyUsageOID.SERVER_AUTH, names=names
    )
    client_key, client = _signed(ca, ca_key, now, common_name=CLIENT, usage=ExtendedKeyUsageOID.CLIENT_AUTH, names=[])
    written = {
        found.key: _pkcs8(server_key),
        found.chain: _pems(server, ca),
        found.keystore: _pkcs8(server_key) + _pems(server, ca),
        found.client_key: _pkcs8(client_key),
        found.client_chain: _pems(client, ca),
    }
    for path, content in written.items():
        path.write_bytes(content)
        path.chmod(0o600)
    found.ca.write_bytes(_pems(ca))
    return found


def _signed(
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    now: datetime.datetime,
    *,
    common_name: str,
    usage: x509.ObjectIdentifier,
    names: list[x509.GeneralName],
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A new key and its certificate for ``common_name``, signed by the CA, for ``usage`` (server or client)."""
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        _builder(_name(common_name), ca.subject, key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pkcs8(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _pems(*certificates: x509.Certificate) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certificates)


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePublicKey, now: datetime.datetime
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALID_FOR)
    )


def _usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=not cert_sign,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )
