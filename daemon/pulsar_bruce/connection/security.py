"""What the security options turn into at start: the TLS context, the credentials, warnings.

Built once by the server (and by ``--check-config``, to validate the files)
from explicit values, so this layer never reads the configuration itself.
Every failure is a :class:`SecuritySetupError` whose message names the option;
no message ever contains the auth token.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from dataclasses import dataclass

from pulsar_bruce.connection.auth import AuthProvider, AuthSetupError, TlsAuth, TokenAuth
from pulsar_bruce.connection.oauth2 import OAuth2Options, oauth2_auth
from pulsar_bruce.connection.tls import TlsSetupError, build_ssl_context
from pulsar_bruce.model.secret import Secret
from pulsar_bruce.model.service_url import ServiceUrl

METRICS_EXPOSED = "metrics and status are reachable from the network"


class SecuritySetupError(Exception):
    """A TLS or token file cannot be used; the message is one line naming the option."""


@dataclass(frozen=True, slots=True)
class ConnectionSecurity:
    ssl_context: ssl.SSLContext | None
    auth: AuthProvider | None
    #: Logged once at start (insecure or ignored settings).
    warnings: tuple[str, ...] = ()

    @classmethod
    def build(
        cls,
        *,
        service_url: str,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        verify_hostname: bool = True,
        token_file: str | None = None,
        token: Secret | None = None,
        oauth2: OAuth2Options | None = None,
        metrics_listen: tuple[str, int] | None = None,
    ) -> ConnectionSecurity:
        """TLS for ``pulsar+ssl://``, token auth from a file, a value or an OAuth2 issuer
        (else, with a client certificate, TLS auth), and start warnings."""
        warnings = []
        tls = ServiceUrl.parse(service_url).tls
        ssl_context = None
        if tls:
            try:
                ssl_context = build_ssl_context(
                    ca_file=ca_file,
                    cert_file=cert_file,
                    key_file=key_file,
                    verify_hostname=verify_hostname,
                )
            except TlsSetupError as exc:
                raise SecuritySetupError(str(exc)) from None
            if not verify_hostname:
                warnings.append(
                    "TLS hostname verification is off (--no-tls-hostname-verification): "
                    "any certificate signed by a trusted CA is accepted for any broker"
                )
        elif any((ca_file, cert_file, key_file)):
            warnings.append("the --tls-* options are ignored: --service-url is not pulsar+ssl://")
        auth: AuthProvider | None = None
        if token_file is not None:
            try:
                auth = TokenAuth(path=token_file)
            except AuthSetupError as exc:
                raise SecuritySetupError(f"--auth-token-file: {exc}") from None
        elif oauth2 is not None:
            auth = _oauth2(oauth2, warnings)
        elif token is not None:
            auth = TokenAuth(token=token)  # a value in memory cannot be unreadable
        elif ssl_context is not None and cert_file is not None:
            auth = TlsAuth()  # the certificate authenticates us; Connect names the method
        if auth is not None and not tls:
            warnings.append(
                "the auth token is sent over an unencrypted connection (use pulsar+ssl://)"
            )
        exposed = metrics_exposure_warning(metrics_listen)
        if exposed:
            warnings.append(exposed)
        return cls(ssl_context, auth, tuple(warnings))


def _oauth2(options: OAuth2Options, warnings: list[str]) -> AuthProvider:
    """The OAuth2 provider: the issuer's TLS context and the credentials file, checked now."""
    try:
        context = build_ssl_context(ca_file=options.ca_file)
    except TlsSetupError as exc:
        reason = str(exc).removeprefix(f"{exc.option}: ")
        raise SecuritySetupError(f"--oauth2-ca-file: {reason}") from None
    if options.issuer_url.lower().startswith("http://"):
        warnings.append("the OAuth2 client secret is sent to the issuer unencrypted (use https://)")
    try:
        return oauth2_auth(options, context)
    except AuthSetupError as exc:
        raise SecuritySetupError(f"--oauth2-credentials-file: {exc}") from None


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
