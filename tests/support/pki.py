"""Test certificates, made with the ``openssl`` CLI, and a broker-side TLS context.

:func:`make_pki` writes a CA, server certificates (one for 127.0.0.1/localhost,
one for another name) and a client certificate into a directory.
"""

from __future__ import annotations

import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    ca: Path  # CA certificate (PEM): the trust store to give the daemon
    server_cert: Path  # for 127.0.0.1 and localhost, signed by the CA
    server_key: Path
    wrong_name_cert: Path  # for wrong.example only, signed by the CA
    wrong_name_key: Path
    client_cert: Path  # client certificate signed by the CA
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(
        ["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"openssl {' '.join(args)} failed:\n{result.stderr}"


def _issue(directory: Path, name: str, subject: str, extensions: str) -> tuple[Path, Path]:
    key, csr, cert, ext = (directory / f"{name}.{kind}" for kind in ("key", "csr", "pem", "ext"))
    ext.write_text(extensions)
    _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", key.name,
             "-out", csr.name, "-subj", subject, cwd=directory)  # fmt: skip
    _openssl("x509", "-req", "-in", csr.name, "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-sha256", "-extfile", ext.name,
             "-out", cert.name, cwd=directory)  # fmt: skip
    return cert, key


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
             "-out", "ca.pem", "-days", "2", "-sha256", "-subj", "/CN=pulsar-bruce test CA",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-addext", "subjectKeyIdentifier=hash", cwd=directory)  # fmt: skip
    leaf = (
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "authorityKeyIdentifier=keyid\n"
        "subjectKeyIdentifier=hash\n"
    )
    server = _issue(
        directory, "server", "/CN=localhost",
        leaf + "extendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )  # fmt: skip
    wrong = _issue(
        directory, "wrong", "/CN=wrong.example",
        leaf + "extendedKeyUsage=serverAuth\nsubjectAltName=DNS:wrong.example\n",
    )  # fmt: skip
    client = _issue(directory, "client", "/CN=pulsar-bruce", leaf + "extendedKeyUsage=clientAuth\n")
    return Pki(directory / "ca.pem", *server, *wrong, *client)


def server_context(cert: Path, key: Path, client_ca: Path | None = None) -> ssl.SSLContext:
    """A broker-side context; with ``client_ca`` a client certificate is required."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    if client_ca is not None:
        context.load_verify_locations(cafile=client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
    return context
