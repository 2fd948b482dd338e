"""Certificate facts the agent and the daemon both check before they trust or install one.

One definition each of "is a certificate authority", "signed directly by that CA" and "this key
belongs to this certificate", so the agent's enrollment and the daemon's PKI judge alike.
"""

from __future__ import annotations

import logging

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

_LOGGER = logging.getLogger(__name__)

_SPKI = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def is_ca(cert: x509.Certificate) -> bool:
    """Whether ``cert`` says it is a certificate authority (basic constraints ``ca``); no such
    extension: it is not."""
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    """Whether ``ca`` signed ``cert`` directly (a forged or foreign signature, or another key type: no)."""
    try:
        cert.verify_directly_issued_by(ca)
        return True
    except (ValueError, TypeError, InvalidSignature):
        return False


def same_key(key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> bool:
    """Whether ``key`` is the private half of ``cert``'s public key."""
    return key.public_key().public_bytes(*_SPKI) == cert.public_key().public_bytes(*_SPKI)
