"""End-to-end encryption of batch payloads, once per batch, as the official Pulsar clients do it.

The Java client's ``MessageCryptoBc`` and the C++ client's ``MessageCrypto`` (which
the official Python, C++ and Node.js consumers run) agree on this format:

- a random AES-256 *data key*; each payload (after compression) is sealed with
  AES-GCM under it, a fresh random 12-byte IV per payload (``encryption_param``),
  the 16-byte tag appended to the ciphertext;
- the data key encrypted with each recipient's RSA public key, RSA-OAEP with SHA-1
  and MGF1-SHA-1 (``RSA/NONE/OAEPWithSHA1AndMGF1Padding``), one ``EncryptionKeys``
  (key name, encrypted data key) per recipient in the message metadata;
- a new data key every four hours (the Java client's ``ProducerImpl`` schedules
  ``addPublicKeyCipher`` at that fixed delay); here also after 2**31 payloads, the
  bound on random IVs under one GCM key.

EC keys are refused: the Java client encrypts for them with BouncyCastle's ECIES,
which libpulsar cannot decrypt, so the Python, C++ and Node.js consumers could
never read such messages.

Keys are read and checked when the configuration is (at start, on SIGHUP); the
clock and the random source are passed in, so the rest is sans-IO.  ``cryptography``
is imported only when keys are configured: it adds some 18 MB to the daemon's RSS.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

DATA_KEY_BYTES = 32
IV_BYTES = 12
TAG_BYTES = 16
#: The Java client regenerates its data key at this fixed delay (``ProducerImpl``).
ROTATE_MS = 4 * 60 * 60 * 1000
#: Payloads sealed under one data key at most (NIST SP 800-38D: 2**32 with random IVs).
MAX_SEALS = 1 << 31


def oaep() -> padding.OAEP:
    """As ``RSA/NONE/OAEPWithSHA1AndMGF1Padding`` and libpulsar's ``RSA_PKCS1_OAEP_PADDING``."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    return padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None)


Random = Callable[[int], bytes]


class EncryptionError(Exception):
    """Sealing a payload failed: its batch is discarded, never sent in plaintext."""


@dataclass(frozen=True, slots=True)
class Recipient:
    """One public key the data key is encrypted for, under the name consumers look it up by."""

    name: str
    path: str
    key: rsa.RSAPublicKey


def public_key(pem: bytes, where: str) -> rsa.RSAPublicKey:
    """The RSA public key in ``pem`` (a public key or a certificate); ValueError saying why
    not, naming ``where`` and never quoting the file."""
    from cryptography import x509
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    if b"PRIVATE KEY" in pem:
        raise ValueError(f"{where} holds a private key; give its public key (openssl pkey -pubout)")
    try:
        key: object = (
            x509.load_pem_x509_certificate(pem).public_key()
            if b"-----BEGIN CERTIFICATE-----" in pem
            else serialization.load_pem_public_key(pem)
        )
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise ValueError(f"{where} is not a PEM public key or certificate") from None
    if isinstance(key, ec.EllipticCurvePublicKey):
        raise ValueError(
            f"{where} is an EC key: only the Java client decrypts EC (ECIES) data keys, the "
            "Python, C++ and Node.js consumers (libpulsar) read RSA only; use an RSA key"
        )
    if not isinstance(key, rsa.RSAPublicKey):
        raise ValueError(f"{where} is not an RSA public key")
    try:
        key.encrypt(bytes(DATA_KEY_BYTES), oaep())
    except ValueError:
        raise ValueError(
            f"{where}: a {key.key_size}-bit RSA key is too small to encrypt a data key"
        ) from None
    return key


def read_recipients(specs: Sequence[str]) -> tuple[Recipient, ...]:
    """The keys named by ``NAME=PATH`` specs (``--encryption-keys``), read now; ValueError
    with one line when a file cannot be read or used."""
    recipients = []
    for spec in specs:
        name, _, path = spec.partition("=")
        try:
            pem = Path(path).read_bytes()
        except OSError as exc:
            raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
        recipients.append(Recipient(name, path, public_key(pem, path)))
    return tuple(recipients)


class DataKey:
    """One AES-256 data key, encrypted for each recipient, and the payloads sealed under it."""

    __slots__ = ("_aead", "_random", "created_ms", "keys", "overhead", "seals")

    #: What :func:`pulsar_bruce.frame.commands.single_message_sends` needs to size chunks.
    expansion = TAG_BYTES
    param_bytes = IV_BYTES

    def __init__(self, recipients: Sequence[Recipient], now_ms: int, random: Random):
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        secret = random(DATA_KEY_BYTES)
        self._aead = AESGCM(secret)
        self._random = random
        self.created_ms = now_ms
        self.seals = 0
        #: ``(name, encrypted data key)`` for each recipient: the metadata's ``encryption_keys``.
        scheme = oaep()
        self.keys = tuple((r.name, r.key.encrypt(secret, scheme)) for r in recipients)
        #: Bytes encryption adds to a Send frame (keys, IV, tag), generously.
        per_key = sum(len(name.encode()) + len(value) + 12 for name, value in self.keys)
        self.overhead = TAG_BYTES + IV_BYTES + 4 + per_key

    def usable(self, now_ms: int) -> bool:
        return self.created_ms <= now_ms < self.created_ms + ROTATE_MS and self.seals < MAX_SEALS

    def seal(self, plaintext: bytes) -> tuple[bytes, bytes]:
        """``(iv, ciphertext with its tag)``: ``encryption_param`` and the payload to send."""
        try:
            iv = self._random(IV_BYTES)
            self.seals += 1
            return iv, self._aead.encrypt(iv, plaintext, None)
        except Exception as exc:  # whatever it was, the payload must not go out
            raise EncryptionError(f"cannot encrypt a payload: {exc}") from exc


class Encryptor:
    """The current data key for one set of recipients, renewed on the Java client's schedule.

    Shared by the producers of the topics whose settings name these keys; a new one
    (a new data key) is made when the configuration is read again.
    """

    __slots__ = ("_current", "_random", "recipients")

    def __init__(self, recipients: Sequence[Recipient], random: Random = os.urandom):
        self.recipients = tuple(recipients)
        self._random = random
        self._current: DataKey | None = None

    def data_key(self, now_ms: int) -> DataKey:
        """The data key to seal with at wall-clock ``now_ms`` (a new one when it is due)."""
        current = self._current
        if current is None or not current.usable(now_ms):
            try:
                current = self._current = DataKey(self.recipients, now_ms, self._random)
            except Exception as exc:  # no data key, no sending: never plaintext instead
                raise EncryptionError(f"cannot make a data key: {exc}") from exc
        return current


def decrypt(
    private_key: rsa.RSAPrivateKey, encrypted_key: bytes, iv: bytes, payload: bytes
) -> bytes:
    """The inverse of one seal, for tests and tools: what a consumer with the key reads."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM(private_key.decrypt(encrypted_key, oaep())).decrypt(iv, payload, None)
