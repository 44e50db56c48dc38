"""End-to-end encryption, sans-IO: key files, the data key and its schedule, sealing.

What the official consumers need (libpulsar's ``MessageCrypto::decrypt``): AES-256-GCM
with a 12-byte IV and the 16-byte tag after the ciphertext, the data key under RSA-OAEP
with SHA-1 and MGF1-SHA-1.  The AES-GCM layout is checked against the published test
vectors (McGrew & Viega, "The Galois/Counter Mode of Operation", test cases 13 and 14).
"""

from __future__ import annotations

import datetime
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import NameOID
from pulsar_bruce.batch import encryption
from pulsar_bruce.batch.encryption import (
    DATA_KEY_BYTES,
    IV_BYTES,
    MAX_SEALS,
    ROTATE_MS,
    DataKey,
    EncryptionError,
    Encryptor,
    Recipient,
    read_recipients,
)

NOW_MS = 1_700_000_000_000


@pytest.fixture(scope="module")
def private_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def public_pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def recipient(private_key: rsa.RSAPrivateKey, name: str = "app") -> Recipient:
    return Recipient(name, f"{name}.pem", private_key.public_key())


class Counting:
    """A predictable random source: 0x00, 0x01, ... (a test's data key and IVs)."""

    def __init__(self) -> None:
        self.next = 0

    def __call__(self, size: int) -> bytes:
        out = bytes((self.next + i) % 256 for i in range(size))
        self.next += size
        return out


# -- key files ---------------------------------------------------------------------------------


def test_public_keys_are_read_under_their_names(tmp_path: Path, private_key) -> None:
    (tmp_path / "a.pem").write_bytes(public_pem(private_key))
    [key] = read_recipients([f"app={tmp_path / 'a.pem'}"])
    assert (key.name, key.path) == ("app", str(tmp_path / "a.pem"))
    assert key.key.public_numbers() == private_key.public_key().public_numbers()


def test_an_rsa_public_key_in_pkcs1_is_read_too(tmp_path: Path, private_key) -> None:
    pem = private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.PKCS1
    )
    assert pem.startswith(b"-----BEGIN RSA PUBLIC KEY-----")
    (tmp_path / "a.pem").write_bytes(pem)
    [key] = read_recipients([f"app={tmp_path / 'a.pem'}"])
    assert key.key.public_numbers() == private_key.public_key().public_numbers()


def test_the_daemon_imports_cryptography_only_when_keys_are_read() -> None:
    """It adds some 18 MB to the daemon's RSS, which topics without encryption need not pay."""
    code = "import sys, pulsar_bruce.server; print('cryptography' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (result.returncode, result.stdout) == (0, "False\n"), result.stderr


def test_a_certificate_gives_its_public_key(tmp_path: Path, private_key) -> None:
    """As the Java client's ``loadPublicKey`` takes an X.509 certificate too."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "app")])
    start = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(private_key.public_key())
        .serial_number(1)
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=1))
        .sign(private_key, hashes.SHA256())
    )
    (tmp_path / "cert.pem").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    [key] = read_recipients([f"cert={tmp_path / 'cert.pem'}"])
    assert key.key.public_numbers() == private_key.public_key().public_numbers()


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as refused:
        read_recipients([f"app={tmp_path / 'none.pem'}"])
    assert str(refused.value) == f"cannot read {tmp_path / 'none.pem'}: No such file or directory"


def test_an_ec_key_is_refused_with_the_reason(tmp_path: Path) -> None:
    """The Java client would encrypt for it with ECIES, which libpulsar cannot decrypt."""
    (tmp_path / "ec.pem").write_bytes(public_pem(ec.generate_private_key(ec.SECP256R1())))
    with pytest.raises(ValueError) as refused:
        read_recipients([f"ec={tmp_path / 'ec.pem'}"])
    assert str(refused.value) == (
        f"{tmp_path / 'ec.pem'} is an EC key: only the Java client decrypts EC (ECIES) data "
        "keys, the Python, C++ and Node.js consumers (libpulsar) read RSA only; use an RSA key"
    )


def test_a_private_key_is_refused_without_quoting_it(tmp_path: Path, private_key) -> None:
    pem = private_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    (tmp_path / "private.pem").write_bytes(pem)
    with pytest.raises(ValueError) as refused:
        read_recipients([f"p={tmp_path / 'private.pem'}"])
    assert "holds a private key" in str(refused.value)
    assert "BEGIN" not in str(refused.value)


@pytest.mark.parametrize("content", [b"", b"not a key\n", b"-----BEGIN PUBLIC KEY-----\nxx\n"])
def test_anything_else_is_not_a_public_key(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "k.pem").write_bytes(content)
    with pytest.raises(ValueError, match=r"is not a PEM public key or certificate$"):
        read_recipients([f"k={tmp_path / 'k.pem'}"])


def test_an_rsa_key_too_small_for_oaep_is_refused() -> None:
    """OAEP with SHA-1 needs 42 bytes besides the 32-byte data key: 592 bits at least."""
    small = rsa.RSAPublicNumbers(65537, (1 << 511) | 1).public_key()
    pem = small.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with pytest.raises(ValueError, match="a 512-bit RSA key is too small"):
        encryption.public_key(pem, "small.pem")


# -- the data key ------------------------------------------------------------------------------


def test_the_data_key_is_rsa_oaep_sha1_for_each_recipient(private_key) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key = DataKey([recipient(private_key), recipient(other, "ops")], NOW_MS, Counting())
    secret = bytes(range(DATA_KEY_BYTES))  # the first bytes the source gave
    assert [name for name, _ in key.keys] == ["app", "ops"]
    sha1 = padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None)
    assert private_key.decrypt(key.keys[0][1], sha1) == secret
    assert other.decrypt(key.keys[1][1], sha1) == secret
    assert len(key.keys[0][1]) == 256  # one RSA block of the 2048-bit key
    sha256 = padding.OAEP(mgf=padding.MGF1(hashes.SHA256()), algorithm=hashes.SHA256(), label=None)
    with pytest.raises(ValueError):
        private_key.decrypt(key.keys[0][1], sha256)


def test_sealing_is_aes_256_gcm_with_the_tag_after_the_ciphertext(private_key) -> None:
    """Golden bytes: test cases 13 and 14 (all-zero key and IV) of the GCM specification."""
    key = DataKey([recipient(private_key)], NOW_MS, lambda size: bytes(size))
    assert key.seal(b"") == (bytes(12), bytes.fromhex("530f8afbc74536b9a963b4f1c4cb738b"))
    iv, sealed = key.seal(bytes(16))
    assert iv == bytes(IV_BYTES)
    assert sealed.hex() == "cea7403d4d606b6e074ec5d3baf39d18d0d1c8a799996bf0265b98b5d48ab919"


def test_each_payload_has_its_own_iv_and_a_consumer_with_the_key_reads_it(private_key) -> None:
    key = Encryptor([recipient(private_key)]).data_key(NOW_MS)
    first, second = key.seal(b"hello"), key.seal(b"hello")
    assert first[0] != second[0] and first[1] != second[1]
    for iv, sealed in (first, second):
        assert len(iv) == IV_BYTES and len(sealed) == len(b"hello") + key.expansion
        assert encryption.decrypt(private_key, key.keys[0][1], iv, sealed) == b"hello"


def test_the_overhead_covers_what_encryption_adds_to_the_metadata(private_key) -> None:
    from pulsar_bruce.frame import pulsar_api_pb2 as pb

    key = DataKey([recipient(private_key), recipient(private_key, "x" * 40)], NOW_MS, Counting())
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=NOW_MS)
    plain = md.ByteSize()
    md.encryption_keys.extend(pb.EncryptionKeys(key=k, value=v) for k, v in key.keys)
    md.encryption_param = bytes(IV_BYTES)
    assert md.ByteSize() - plain + key.expansion <= key.overhead


# -- the schedule ------------------------------------------------------------------------------


def test_a_new_data_key_every_four_hours_as_the_java_client(private_key) -> None:
    encryptor = Encryptor([recipient(private_key)])
    first = encryptor.data_key(NOW_MS)
    assert encryptor.data_key(NOW_MS + ROTATE_MS - 1) is first
    second = encryptor.data_key(NOW_MS + ROTATE_MS)
    assert second is not first and second.keys != first.keys
    assert encryptor.data_key(NOW_MS + ROTATE_MS + 1) is second


def test_a_clock_set_back_gives_a_new_data_key(private_key) -> None:
    encryptor = Encryptor([recipient(private_key)])
    first = encryptor.data_key(NOW_MS)
    assert encryptor.data_key(NOW_MS - 1) is not first


def test_a_data_key_seals_at_most_max_seals_payloads(private_key) -> None:
    encryptor = Encryptor([recipient(private_key)])
    first = encryptor.data_key(NOW_MS)
    first.seals = MAX_SEALS - 1
    first.seal(b"x")
    assert encryptor.data_key(NOW_MS) is not first


# -- failures ----------------------------------------------------------------------------------


def broken(size: int) -> bytes:
    raise OSError("no entropy")


def test_no_data_key_is_an_encryption_error(private_key) -> None:
    with pytest.raises(EncryptionError, match="cannot make a data key: no entropy"):
        Encryptor([recipient(private_key)], random=broken).data_key(NOW_MS)


def test_a_failed_seal_is_an_encryption_error(private_key) -> None:
    key = Encryptor([recipient(private_key)]).data_key(NOW_MS)
    key._random = broken
    with pytest.raises(EncryptionError, match="cannot encrypt a payload: no entropy"):
        key.seal(b"x")
