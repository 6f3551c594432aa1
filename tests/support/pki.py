"""Test certificates with the extensions RFC 5280 requires, defined once for every rig.

Python 3.13's ``ssl.create_default_context()`` sets ``VERIFY_X509_STRICT``, and the agent sets it on
every interpreter (``common.http.tls_context``): OpenSSL then refuses a certificate without what
RFC 5280 section 4.2 requires -- a CA with basicConstraints critical, keyUsage with keyCertSign and a
subjectKeyIdentifier (4.2.1.2); every certificate an authorityKeyIdentifier naming its issuer's key
(4.2.1.1) except a self-signed root; a subjectAltName when the subject is empty, never empty
(4.2.1.6). ``leaf(..., rfc5280=False)`` is the certificate many hand-rolled CAs issue (no AKI, no
SKI, no keyUsage): what a user may give the agent, for the tests of its clear refusal.
"""
from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
LOOPBACK_SANS = ("localhost", "127.0.0.1")
SERVER, CLIENT = ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH


@dataclass(frozen=True)
class Issuer:
    """A CA: its certificate and key."""

    cert: x509.Certificate
    key: PrivateKey


def _validity(builder: x509.CertificateBuilder, days: float) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return builder.not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=days))


def _key_usage(*, signs_certs: bool, enciphers_keys: bool) -> x509.KeyUsage:
    return x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=enciphers_keys,
                         data_encipherment=False, key_agreement=False, key_cert_sign=signs_certs,
                         crl_sign=signs_certs, encipher_only=False, decipher_only=False)


def name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
                     + [x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def ca(common_name: str, key: PrivateKey, days: float = 2) -> Issuer:
    """A self-signed root: basicConstraints CA critical, keyUsage keyCertSign+cRLSign critical, SKI."""
    subject = name(common_name)
    builder = (_validity(x509.CertificateBuilder(), days)
               .subject_name(subject).issuer_name(subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
               .add_extension(_key_usage(signs_certs=True, enciphers_keys=False), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False))
    return Issuer(builder.sign(key, hashes.SHA256()), key)


def _san(entry: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(entry))
    except ValueError:
        return x509.DNSName(entry)


def leaf(subject: x509.Name, key: PrivateKey, issuer: Issuer, usages: tuple[x509.ObjectIdentifier, ...],
         sans: tuple[str, ...] = (), days: float = 2, rfc5280: bool = True) -> x509.Certificate:
    """An end-entity certificate from ``issuer``: basicConstraints CA:FALSE critical, extendedKeyUsage,
    the SANs (DNS names or IP addresses) and, unless ``rfc5280`` is False, keyUsage, SKI and the AKI
    that names the issuer's key."""
    builder = (_validity(x509.CertificateBuilder(), days)
               .subject_name(subject).issuer_name(issuer.cert.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName([_san(s) for s in sans]), critical=False)
    if rfc5280:
        issuer_ski = issuer.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        builder = (builder
                   .add_extension(_key_usage(signs_certs=False, enciphers_keys=isinstance(key, rsa.RSAPrivateKey)),
                                  critical=True)
                   .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(issuer_ski),
                                  critical=False))
    return builder.sign(issuer.key, hashes.SHA256())
