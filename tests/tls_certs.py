"""Certificates made in the test (``cryptography``): a CA, a broker's certificate for
127.0.0.1 / localhost, clients' certificates, written as PEM or PKCS12 files."""
from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_NAMES = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
          "O": NameOID.ORGANIZATION_NAME, "C": NameOID.COUNTRY_NAME}


def _name(subject: str) -> x509.Name:
    """``CN=alice,OU=ServiceUsers,O=Org`` (RFC 2253 order: most specific first)."""
    parts = [p.split("=", 1) for p in subject.split(",")]
    return x509.Name([x509.NameAttribute(_NAMES[k], v) for k, v in reversed(parts)])


@dataclass
class Identity:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    def key_pem(self, password: str | None = None) -> bytes:
        encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                      else serialization.NoEncryption())
        return self.key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8, encryption)

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def pkcs12(self, password: str, ca: "Identity | None" = None) -> bytes:
        return pkcs12.serialize_key_and_certificates(
            b"rafka", self.key, self.cert, [ca.cert] if ca else None,
            serialization.BestAvailableEncryption(password.encode()))


def _build(subject: str, issuer: Identity | None, key, *, ca: bool = False,
           server: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder()
               .subject_name(_name(subject))
               .issuer_name(issuer.cert.subject if issuer else _name(subject))
               .public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True,
            content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage(
            [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False)
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
    return builder.sign(issuer.key if issuer else key, hashes.SHA256())


def authority(subject: str = "CN=rafka test CA,O=rafka") -> Identity:
    key = ec.generate_private_key(ec.SECP256R1())
    return Identity(key, _build(subject, None, key, ca=True))


def issue(ca: Identity, subject: str, *, server: bool = False) -> Identity:
    key = ec.generate_private_key(ec.SECP256R1())
    return Identity(key, _build(subject, ca, key, server=server))


def write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)
