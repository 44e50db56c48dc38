"""Authentication: a token (where it comes from) or mutual TLS, and the broker's AuthChallenge.

The token is sent in ``CommandConnect`` (``auth_method_name = "token"``,
``auth_data`` = the token's bytes) on every new connection, and again in
``CommandAuthResponse`` when the broker challenges (during the handshake, or
later with ``auth_data = "refresh"`` when it wants fresh credentials).  A token
file is re-read each time, so a rotated token is picked up without a restart.

An OAuth2 token (``connection/oauth2.py``) is a token too; its provider's
``ready()`` waits until the issuer has given one.

The token itself never reaches a log line, an exception message, ``repr()`` or
a metric: it lives in a :class:`~pulsar_bruce.model.secret.Secret`.

With a client certificate and no token, ``Connect`` names the ``"tls"``
method with empty ``auth_data``, as the Java client's ``AuthenticationTls``
does: the certificate presented in the TLS handshake is the credential, and a
broker whose only authentication provider is ``AuthenticationProviderTls``
refuses a Connect that does not name it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol

from pulsar_bruce.frame import commands
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import encode_command
from pulsar_bruce.model.secret import Secret

log = logging.getLogger(__name__)

TOKEN_METHOD = "token"
TLS_METHOD = "tls"


class AuthSetupError(Exception):
    """The credentials cannot be read (the message names the file, never the token)."""


class AuthProvider(Protocol):
    """Credentials for one authentication method, fetched for every connection."""

    @property
    def method_name(self) -> str: ...

    async def ready(self) -> None:
        """Wait until credentials are at hand (an OAuth2 token is fetched from its issuer)."""

    def auth_data(self) -> bytes: ...


class TokenAuth:
    """Pulsar token authentication from a file (re-read on each use) or a fixed value."""

    method_name = TOKEN_METHOD

    def __init__(self, *, path: str | None = None, token: Secret | None = None):
        if (path is None) == (token is None):
            raise ValueError("TokenAuth needs exactly one of path and token")
        self.path = path
        self._last: bytes | None = None
        self._failing = False
        if token is not None:
            self._last = _token_bytes(token.reveal())
        else:
            self._last = self._read()  # at start an unreadable file is an error

    def _read(self) -> bytes:
        assert self.path is not None
        try:
            text = Path(self.path).read_text(encoding="utf-8")
        except OSError as exc:
            raise AuthSetupError(f"cannot read {self.path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise AuthSetupError(f"{self.path} is not UTF-8 text") from None
        token = _token_bytes(text)
        if not token:
            raise AuthSetupError(f"{self.path} is empty")
        return token

    async def ready(self) -> None:
        return None

    def auth_data(self) -> bytes:
        """The current token; a file that became unreadable keeps the last good token."""
        if self.path is None:
            assert self._last is not None
            log.debug("auth token: from the environment")
            return self._last
        try:
            token = self._read()
        except AuthSetupError as exc:
            if not self._failing:
                log.warning("auth token: %s; using the last token read", exc)
            self._failing = True
            assert self._last is not None
            return self._last
        if self._failing:
            log.info("auth token: %s is readable again", self.path)
            self._failing = False
        log.debug("auth token: read from %s", self.path)
        self._last = token
        return token

    def __repr__(self) -> str:
        source = f"path={self.path!r}" if self.path else "token=Secret('***')"
        return f"TokenAuth({source})"


class TlsAuth:
    """Mutual-TLS authentication: the client certificate is the credential, not these bytes."""

    method_name = TLS_METHOD

    async def ready(self) -> None:
        return None

    def auth_data(self) -> bytes:
        return b""

    def __repr__(self) -> str:
        return "TlsAuth()"


def _token_bytes(text: str) -> bytes:
    """A token file's content: the trailing newline (and surrounding blanks) are not part of it."""
    return text.strip().encode("utf-8")


def auth_response_frame(method_name: str, auth_data: bytes) -> bytes:
    """``CommandAuthResponse`` answering a broker's ``AuthChallenge``."""
    cmd = pb.BaseCommand(type=pb.BaseCommand.AUTH_RESPONSE)
    response = cmd.authResponse
    response.client_version = commands.CLIENT_VERSION
    response.protocol_version = commands.PROTOCOL_VERSION
    response.response.auth_method_name = method_name
    response.response.auth_data = auth_data
    return encode_command(cmd)
