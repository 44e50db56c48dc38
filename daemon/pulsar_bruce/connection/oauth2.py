"""OAuth2 client credentials, as Pulsar's ``AuthenticationOAuth2`` does it.

The issuer's OpenID metadata (``{issuer}/.well-known/openid-configuration``)
names its ``token_endpoint``; a form POST of ``grant_type=client_credentials``
with the client id and secret (and the audience and scope when configured)
returns an ``access_token`` and its ``expires_in``.  The access token is then a
Pulsar token: ``Connect`` names the ``"token"`` method with it, as Java's
``AuthenticationOAuth2`` does, and so does the answer to an ``AuthChallenge``.

HTTP uses only the standard library (``urllib``), in a worker thread so the
event loop never blocks.  A background task fetches the next token at 90% of
the current one's lifetime, so a broker's challenge (sent when it sees the
token expire) is answered with a fresh one.  An issuer that cannot be reached
is retried with backoff while new connections wait for a token.

The client secret and the access tokens live in :class:`Secret` and reach no
log line, exception message or ``repr()``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pulsar_bruce.connection.auth import TOKEN_METHOD, AuthSetupError
from pulsar_bruce.model.secret import Secret

log = logging.getLogger(__name__)

WELL_KNOWN = "/.well-known/openid-configuration"
#: Lifetime assumed when the issuer's answer has no ``expires_in``.
DEFAULT_LIFETIME_S = 3600.0
#: The next token is fetched when this share of the current one's lifetime has passed.
REFRESH_AT = 0.9
HTTP_TIMEOUT_S = 10.0


class IssuerError(Exception):
    """The issuer could not give a token (the message holds no secret and no token)."""


@dataclass(frozen=True, slots=True)
class ClientCredentials:
    client_id: str
    client_secret: Secret

    @classmethod
    def read(cls, path: str) -> ClientCredentials:
        """The JSON credentials file (``client_id``, ``client_secret``; other keys ignored)."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise AuthSetupError(f"cannot read {path}: {exc.strerror or exc}") from None
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise AuthSetupError(f"{path} is not a JSON object") from None
        if not isinstance(data, dict):
            raise AuthSetupError(f"{path} is not a JSON object")
        for key in ("client_id", "client_secret"):
            if not isinstance(data.get(key), str) or not data[key]:
                raise AuthSetupError(f"{path} has no {key} (a non-empty string)")
        return cls(data["client_id"], Secret(data["client_secret"]))


@dataclass(frozen=True, slots=True)
class AccessToken:
    value: Secret
    #: Seconds the issuer says the token lives.
    lifetime_s: float


class TokenClient:
    """Blocking HTTP calls to the issuer: metadata once, then one POST per token."""

    def __init__(
        self,
        issuer_url: str,
        credentials: ClientCredentials,
        *,
        audience: str = "",
        scope: str = "",
        ssl_context: ssl.SSLContext | None = None,
        timeout_s: float = HTTP_TIMEOUT_S,
    ):
        self.issuer_url = issuer_url.rstrip("/")
        self.credentials = credentials
        self.audience = audience
        self.scope = scope
        self._ssl_context = ssl_context
        self._timeout_s = timeout_s
        self._endpoint: str | None = None

    def token_endpoint(self) -> str:
        """The ``token_endpoint`` of the issuer's OpenID metadata (asked once)."""
        if self._endpoint is None:
            url = self.issuer_url + WELL_KNOWN
            metadata = self._json(urllib.request.Request(url), "the OpenID metadata")
            endpoint = metadata.get("token_endpoint")
            if not isinstance(endpoint, str) or not endpoint:
                raise IssuerError(f"{url} names no token_endpoint")
            self._endpoint = endpoint
        return self._endpoint

    def form(self) -> dict[str, str]:
        """The client-credentials grant's fields (the secret in clear: send, never log)."""
        fields = {
            "grant_type": "client_credentials",
            "client_id": self.credentials.client_id,
            "client_secret": self.credentials.client_secret.reveal(),
        }
        if self.audience:
            fields["audience"] = self.audience
        if self.scope:
            fields["scope"] = self.scope
        return fields

    def fetch(self) -> AccessToken:
        """A new access token from the token endpoint."""
        endpoint = self.token_endpoint()
        request = urllib.request.Request(
            endpoint,
            data=urllib.parse.urlencode(self.form()).encode("ascii"),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            method="POST",
        )
        answer = self._json(request, "the token endpoint")
        token = answer.get("access_token")
        if not isinstance(token, str) or not token:
            raise IssuerError(f"{endpoint} answered without an access_token")
        expires_in = answer.get("expires_in")
        if isinstance(expires_in, bool) or not isinstance(expires_in, int | float):
            lifetime = DEFAULT_LIFETIME_S
        else:
            lifetime = max(float(expires_in), 1.0)
        return AccessToken(Secret(token), lifetime)

    def _json(self, request: urllib.request.Request, what: str) -> dict[str, Any]:
        request.add_header("Accept", "application/json")
        try:
            with urllib.request.urlopen(
                request, timeout=self._timeout_s, context=self._ssl_context
            ) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            raise IssuerError(f"{what} answered HTTP {exc.code}{_oauth_error(exc)}") from None
        except urllib.error.URLError as exc:
            raise IssuerError(f"cannot reach {what} at {request.full_url}: {exc.reason}") from None
        except (OSError, ValueError) as exc:
            raise IssuerError(f"cannot reach {what} at {request.full_url}: {exc}") from None
        try:
            data = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError):
            data = None
        if not isinstance(data, dict):
            raise IssuerError(f"{what} did not answer with a JSON object")
        return data


def _oauth_error(exc: urllib.error.HTTPError) -> str:
    """``: error (description)`` from an RFC 6749 error answer, if there is one."""
    try:
        data = json.loads(exc.read())
    except (OSError, ValueError):
        return ""
    if not isinstance(data, dict) or not isinstance(data.get("error"), str):
        return ""
    description = data.get("error_description")
    return f": {data['error']}" + (f" ({description})" if isinstance(description, str) else "")


class TokenSource(Protocol):
    """Where tokens come from (:class:`TokenClient`): a blocking call, made on a thread."""

    @property
    def issuer_url(self) -> str: ...

    def fetch(self) -> AccessToken: ...


class OAuth2Auth:
    """An :class:`~pulsar_bruce.connection.auth.AuthProvider` whose token comes from an issuer."""

    method_name = TOKEN_METHOD

    def __init__(
        self,
        source: TokenSource,
        *,
        clock: Callable[[], float] = time.monotonic,
        backoff_s: tuple[float, float] = (1.0, 60.0),
    ):
        self.source = source
        self.issuer = source.issuer_url
        self._clock = clock
        self._backoff_s = backoff_s
        self._token: Secret | None = None
        self._refresh_at = 0.0
        self._expires_at = 0.0
        self._lock = asyncio.Lock()
        self._refresher: asyncio.Task[None] | None = None
        #: Tokens obtained so far (for the log and tests; never the tokens themselves).
        self.fetched = 0

    @property
    def has_valid_token(self) -> bool:
        return self._token is not None and self._clock() < self._expires_at

    async def ready(self) -> None:
        """Wait until a token that has not expired is at hand; keep one fresh from now on."""
        if not self.has_valid_token:
            async with self._lock:
                if not self.has_valid_token:
                    await self._fetch_until_ok()
        if self._refresher is None or self._refresher.done():
            self._refresher = asyncio.get_running_loop().create_task(self._refresh_loop())

    def auth_data(self) -> bytes:
        """The current access token (``ready()`` has been awaited before a connection opens)."""
        return self._token.reveal().encode("utf-8") if self._token is not None else b""

    def close(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(max(0.0, self._refresh_at - self._clock()))
            async with self._lock:
                if self._clock() >= self._refresh_at:
                    await self._fetch_until_ok()

    async def _fetch_until_ok(self) -> None:
        delay, longest = self._backoff_s
        failures = 0
        while True:
            try:
                token = await asyncio.to_thread(self.source.fetch)
                break
            except IssuerError as exc:
                failures += 1
                log.warning(
                    "oauth2: no token from %s (attempt %d): %s; retrying in %.3gs",
                    self.issuer, failures, exc, delay,
                )  # fmt: skip
                await asyncio.sleep(delay)
                delay = min(delay * 2, longest)
        now = self._clock()
        self._token = token.value
        self._refresh_at = now + REFRESH_AT * token.lifetime_s
        self._expires_at = now + token.lifetime_s
        self.fetched += 1
        level = logging.INFO if self.fetched == 1 or failures else logging.DEBUG
        log.log(
            level, "oauth2: access token from %s, valid for %.0fs", self.issuer, token.lifetime_s
        )

    def __repr__(self) -> str:
        return f"OAuth2Auth(issuer={self.issuer!r})"


@dataclass(frozen=True, slots=True)
class OAuth2Options:
    """What the ``--oauth2-*`` options say (paths and names, no secret)."""

    issuer_url: str
    credentials_file: str
    audience: str = ""
    scope: str = ""
    ca_file: str | None = None


def oauth2_auth(options: OAuth2Options, ssl_context: ssl.SSLContext | None) -> OAuth2Auth:
    """The provider for the options; reads the credentials file now (AuthSetupError)."""
    client = TokenClient(
        options.issuer_url,
        ClientCredentials.read(options.credentials_file),
        audience=options.audience,
        scope=options.scope,
        ssl_context=ssl_context,
    )
    return OAuth2Auth(client)
