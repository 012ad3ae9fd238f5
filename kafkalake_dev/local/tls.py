"""The local broker's TLS listener's certificates: a certificate authority of the stack's own and the broker's
certificate it signs, as a self-managed cluster's private CA would (Amazon MSK's certificates are publicly trusted, so
its clients need no CA of their own; a private CA's goes in the Kafka secret's ``ca_pem``,
``kafkalake.kafka_access``).

Made once under the stack's state folder (``broker_tls``) and read back after: an EC P-256 key each, the broker's
certificate for 127.0.0.1 and localhost (both clients check the name: librdkafka's and Java's
``ssl.endpoint.identification.algorithm`` is https by default), valid for ten years.
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
class BrokerTls:
    ca: Path
    """The CA's certificate (PEM): what a client trusts."""
    keystore: Path
    """The broker's private key (PKCS#8) and its certificate chain (PEM), as Kafka's PEM keystore reads them."""

    def ca_pem(self) -> str:
        return self.ca.read_text()


def broker_tls(folder: Path) -> BrokerTls:
    """The stack's CA and broker certificate under ``folder``, made on first use."""
    found = BrokerTls(folder / "ca.pem", folder / "broker-keystore.pem")
    if found.ca.exists() and found.keystore.exists():
        return found
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1)
    ca_key, broker_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kafkalake local CA")])
    ca = (
        _builder(ca_name, ca_name, ca_key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(cert_sign=True), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    broker_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    broker = (
        _builder(broker_name, ca_name, broker_key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = broker_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    chain = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in (broker, ca))
    found.keystore.write_bytes(key + chain)
    found.keystore.chmod(0o600)
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
