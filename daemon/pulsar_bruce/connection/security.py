"""What the security options turn into at start: the TLS context, the credentials, warnings.

Built once by the server (and by ``--check-config``, to validate the files).
Every failure is a :class:`~pulsar_bruce.config.ConfigError` naming the option;
no message ever contains the auth token.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from dataclasses import dataclass

from pulsar_bruce.config import AUTH_TOKEN_ENV, Config, ConfigError
from pulsar_bruce.connection.auth import AuthProvider, AuthSetupError, TokenAuth
from pulsar_bruce.connection.pool import ServiceUrl
from pulsar_bruce.connection.tls import TlsSetupError, build_ssl_context

METRICS_EXPOSED = "metrics and status are reachable from the network"


@dataclass(frozen=True, slots=True)
class ConnectionSecurity:
    ssl_context: ssl.SSLContext | None
    auth: AuthProvider | None
    #: Logged once at start (insecure or ignored settings).
    warnings: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: Config) -> ConnectionSecurity:
        warnings = []
        tls = ServiceUrl.parse(config.service_url).tls
        ssl_context = None
        if tls:
            try:
                ssl_context = build_ssl_context(
                    ca_file=config.tls_ca_file,
                    cert_file=config.tls_cert_file,
                    key_file=config.tls_key_file,
                    verify_hostname=config.tls_verify_hostname,
                )
            except TlsSetupError as exc:
                raise ConfigError(str(exc)) from None
            if not config.tls_verify_hostname:
                warnings.append(
                    "TLS hostname verification is off (--no-tls-hostname-verification): "
                    "any certificate signed by a trusted CA is accepted for any broker"
                )
        elif any((config.tls_ca_file, config.tls_cert_file, config.tls_key_file)):
            warnings.append("the --tls-* options are ignored: --service-url is not pulsar+ssl://")
        auth: AuthProvider | None = None
        if config.auth_token_file is not None:
            try:
                auth = TokenAuth(path=config.auth_token_file)
            except AuthSetupError as exc:
                raise ConfigError(f"--auth-token-file: {exc}") from None
        elif config.auth_token is not None:
            try:
                auth = TokenAuth(token=config.auth_token)
            except AuthSetupError:  # pragma: no cover - a value cannot be unreadable
                raise ConfigError(f"{AUTH_TOKEN_ENV}: unusable") from None
        if auth is not None and not tls:
            warnings.append(
                "the auth token is sent over an unencrypted connection (use pulsar+ssl://)"
            )
        exposed = metrics_exposure_warning(config.metrics_listen)
        if exposed:
            warnings.append(exposed)
        return cls(ssl_context, auth, tuple(warnings))


def metrics_exposure_warning(listen: tuple[str, int] | None) -> str | None:
    """A warning when ``--metrics-listen`` is not a loopback address, else None."""
    if listen is None:
        return None
    host, port = listen
    if is_loopback(host):
        return None
    return f"{METRICS_EXPOSED} (--metrics-listen {host}:{port} is not a loopback address)"


def is_loopback(host: str) -> bool:
    """True when every address ``host`` stands for is a loopback one ("" is every interface)."""
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(
        ipaddress.ip_address(str(address).split("%", 1)[0]).is_loopback for address in addresses
    )
