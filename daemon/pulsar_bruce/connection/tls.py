"""The one ``ssl.SSLContext`` every ``pulsar+ssl://`` connection uses, built at start.

TLS 1.2 or newer; the broker's certificate chain is always verified (against
the CA file, else the system's trust store); its name is checked against the
host we connect to unless hostname verification is turned off; a client
certificate is presented when one is configured.
"""

from __future__ import annotations

import ssl
from pathlib import Path


class TlsSetupError(Exception):
    """A TLS file is missing, unreadable or not what it should be.

    ``option`` is the configuration option at fault (its flag, e.g. ``--tls-ca-file``).
    """

    def __init__(self, option: str, message: str):
        super().__init__(f"{option}: {message}")
        self.option = option


def build_ssl_context(
    *,
    ca_file: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
    verify_hostname: bool = True,
) -> ssl.SSLContext:
    """The client context; raises :class:`TlsSetupError` naming the option at fault."""
    if (cert_file is None) != (key_file is None):
        raise TlsSetupError(
            "--tls-key-file" if key_file is None else "--tls-cert-file",
            "--tls-cert-file and --tls-key-file go together (give both or neither)",
        )
    if ca_file is not None:
        _check_readable("--tls-ca-file", ca_file)
    try:
        # With a CA file, only that file is trusted; without, the system's trust store.
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    except (ssl.SSLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise TlsSetupError("--tls-ca-file", f"cannot use {ca_file}: {reason}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_file is not None and key_file is not None:
        _check_readable("--tls-cert-file", cert_file)
        _check_readable("--tls-key-file", key_file)
        try:
            context.load_cert_chain(cert_file, key_file, password=_no_password)
        except _EncryptedKeyError:
            raise TlsSetupError(
                "--tls-key-file", f"{key_file} is encrypted; give an unencrypted key"
            ) from None
        except ssl.SSLError as exc:
            option = "--tls-key-file" if "KEY" in (exc.reason or "") else "--tls-cert-file"
            raise TlsSetupError(
                option,
                f"cannot use {cert_file} with {key_file}: {exc.reason or exc}",
            ) from None
    context.check_hostname = verify_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def _check_readable(option: str, path: str) -> None:
    try:
        with Path(path).open("rb") as handle:
            head = handle.read(1 << 16)
    except OSError as exc:
        raise TlsSetupError(option, f"cannot read {path}: {exc.strerror or exc}") from None
    if b"-----BEGIN " not in head:
        raise TlsSetupError(option, f"{path} is not a PEM file")


class _EncryptedKeyError(Exception):
    pass


def _no_password() -> bytes:
    """Called by OpenSSL only for an encrypted key: we have no passphrase to give."""
    raise _EncryptedKeyError
