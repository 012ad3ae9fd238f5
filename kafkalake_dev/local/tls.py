"""The local stack's TLS certificates: a certificate authority of the stack's own and the server certificate it
signs, which the broker's SASL_SSL listener and the registry's HTTPS port present, as a self-managed cluster's private
CA would sign them (Amazon MSK's certificates are publicly trusted, so its clients need no CA of their own; a private
CA's goes in the Kafka secret's ``ca_pem``, ``kafkalake.kafka_access``).

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

    def ca_pem(self) -> str:
        return self.ca.read_text()


def stack_tls(folder: Path) -> StackTls:
    """The stack's CA and server certificate under ``folder``, made on first use."""
    found = StackTls(folder / "ca.pem", folder / "server-key.pem", folder / "server-chain.pem", folder / "keystore.pem")
    if all(path.exists() for path in (found.ca, found.key, found.chain, found.keystore)):
        return found
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1)
    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kafkalake local CA")])
    ca = (
        _builder(ca_name, ca_name, ca_key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(cert_sign=True), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    server_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    server = (
        _builder(server_name, ca_name, server_key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = server_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    chain = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in (server, ca))
    for path, content in ((found.key, key), (found.chain, chain), (found.keystore, key + chain)):
        path.write_bytes(content)
        path.chmod(0o600)
    found.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return found


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
