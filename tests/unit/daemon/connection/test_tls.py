"""The TLS context built at start, and one clear error naming the option for each bad file."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pytest
from pulsar_bruce.config import ConfigError, load_config
from pulsar_bruce.connection.tls import TlsSetupError, build_ssl_context
from pulsar_bruce.service.connection_options import connection_security

from tests.support.pki import Pki, make_pki

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_the_context_verifies_chain_and_name_with_tls_1_2_or_newer(pki: Pki) -> None:
    context = build_ssl_context(ca_file=str(pki.ca))
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname is True
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    subjects = [dict(part[0] for part in ca["subject"]) for ca in context.get_ca_certs()]
    assert subjects == [{"commonName": "pulsar-bruce test CA"}]  # only the CA file is trusted


def test_without_a_ca_file_the_system_trust_store_is_used() -> None:
    context = build_ssl_context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_hostname_verification_can_be_turned_off_but_not_chain_verification(pki: Pki) -> None:
    context = build_ssl_context(ca_file=str(pki.ca), verify_hostname=False)
    assert context.check_hostname is False
    assert context.verify_mode == ssl.CERT_REQUIRED


def test_a_client_certificate_is_loaded(pki: Pki) -> None:
    build_ssl_context(
        ca_file=str(pki.ca), cert_file=str(pki.client_cert), key_file=str(pki.client_key)
    )


@pytest.mark.parametrize(
    ("option", "kwargs"),
    [
        ("--tls-ca-file", {"ca_file": "MISSING"}),
        ("--tls-cert-file", {"cert_file": "MISSING", "key_file": "KEY"}),
        ("--tls-key-file", {"cert_file": "CERT", "key_file": "MISSING"}),
    ],
)
def test_a_missing_file_names_the_option(
    pki: Pki, tmp_path: Path, option: str, kwargs: dict[str, str]
) -> None:
    paths = {"MISSING": str(tmp_path / "missing.pem"), "KEY": str(pki.client_key),
             "CERT": str(pki.client_cert)}  # fmt: skip
    with pytest.raises(TlsSetupError) as caught:
        build_ssl_context(**{name: paths[value] for name, value in kwargs.items()})
    assert caught.value.option == option
    assert str(caught.value) == (
        f"{option}: cannot read {tmp_path / 'missing.pem'}: No such file or directory"
    )


def test_an_unreadable_file_names_the_option(pki: Pki, tmp_path: Path) -> None:
    directory = tmp_path / "a-directory.pem"
    directory.mkdir()
    with pytest.raises(TlsSetupError, match=r"^--tls-ca-file: cannot read .*a-directory\.pem"):
        build_ssl_context(ca_file=str(directory))


def test_a_file_that_is_not_pem_names_the_option(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(TlsSetupError, match=r"^--tls-ca-file: .*junk\.pem is not a PEM file$"):
        build_ssl_context(ca_file=str(junk))


def test_a_ca_file_with_only_a_key_names_the_option(pki: Pki) -> None:
    with pytest.raises(TlsSetupError, match=r"^--tls-ca-file: cannot use "):
        build_ssl_context(ca_file=str(pki.client_key))


def test_a_key_that_does_not_match_the_certificate(pki: Pki) -> None:
    with pytest.raises(TlsSetupError) as caught:
        build_ssl_context(cert_file=str(pki.client_cert), key_file=str(pki.server_key))
    assert caught.value.option in ("--tls-cert-file", "--tls-key-file")
    assert "cannot use" in str(caught.value)


def test_an_encrypted_key_is_refused_without_prompting(pki: Pki, tmp_path: Path) -> None:
    encrypted = tmp_path / "encrypted.key"
    subprocess.run(
        ["openssl", "pkey", "-in", str(pki.client_key), "-aes256", "-passout", "pass:secret",
         "-out", str(encrypted)],
        check=True, capture_output=True,
    )  # fmt: skip
    with pytest.raises(TlsSetupError, match=r"^--tls-key-file: .* is encrypted"):
        build_ssl_context(cert_file=str(pki.client_cert), key_file=str(encrypted))


def test_cert_without_key_names_the_missing_one() -> None:
    with pytest.raises(TlsSetupError) as caught:
        build_ssl_context(cert_file="/etc/c.pem")
    assert caught.value.option == "--tls-key-file"


# -- what the server builds from the configuration ------------------------------------------------


def test_pulsar_ssl_gets_a_context_and_pulsar_does_not(pki: Pki) -> None:
    tls = load_config({"service_url": "pulsar+ssl://b:6651", "tls_ca_file": str(pki.ca)}, {})
    security = connection_security(tls)
    assert isinstance(security.ssl_context, ssl.SSLContext)
    assert security.warnings == ()
    plain = load_config({"tls_ca_file": str(pki.ca)}, {})
    security = connection_security(plain)
    assert security.ssl_context is None
    assert any("--tls-* options are ignored" in w for w in security.warnings)


def test_a_bad_file_becomes_a_config_error_naming_the_option(tmp_path: Path) -> None:
    config = load_config(
        {"service_url": "pulsar+ssl://b:6651", "tls_ca_file": str(tmp_path / "nope.pem")}, {}
    )
    with pytest.raises(ConfigError, match=r"^--tls-ca-file: cannot read .*nope\.pem"):
        connection_security(config)


def test_turning_hostname_verification_off_is_warned_about(pki: Pki) -> None:
    config = load_config(
        {"service_url": "pulsar+ssl://b:6651", "tls_ca_file": str(pki.ca),
         "tls_verify_hostname": "false"},
        {},
    )  # fmt: skip
    security = connection_security(config)
    assert security.ssl_context is not None and not security.ssl_context.check_hostname
    assert any("hostname verification is off" in w for w in security.warnings)
