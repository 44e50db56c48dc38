"""A local OAuth2 issuer over HTTPS (a certificate from ``pki.py``), for client-credentials tests.

It serves the OpenID metadata at ``/.well-known/openid-configuration`` (naming
``/oauth/token`` as its ``token_endpoint``, as a real issuer does) and answers
``grant_type=client_credentials`` POSTs: the right client id and secret get a
new token (``oauth-token-1``, ``oauth-token-2``, ...) with ``expires_in``;
wrong ones get HTTP 401 ``invalid_client`` (RFC 6749 section 5.2).  Every
request is recorded; ``down()`` makes it answer 503 until ``up()``.
``on_issue`` is called with each token (e.g. to make a fake broker accept it).
"""

from __future__ import annotations

import json
import ssl
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN_PATH = "/oauth/token"
METADATA_PATH = "/.well-known/openid-configuration"


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    content_type: str
    form: dict[str, str]


class FakeIssuer:
    def __init__(
        self,
        ssl_context: ssl.SSLContext,
        *,
        client_id: str = "bruce-client",
        client_secret: str = "s3cret-never-logged",
        expires_in: float | None = 3600,
        on_issue: Callable[[str], None] | None = None,
    ):
        self.client_id = client_id
        self.client_secret = client_secret
        self.expires_in = expires_in
        self.on_issue = on_issue
        self._lock = threading.Lock()
        self._requests: list[Request] = []
        self._issued: list[str] = []
        self._down = False
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._server.socket = ssl_context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeIssuer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def down(self) -> None:
        with self._lock:
            self._down = True

    def up(self) -> None:
        with self._lock:
            self._down = False

    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    def issued(self) -> list[str]:
        with self._lock:
            return list(self._issued)

    def _answer(self, request: Request) -> tuple[int, dict[str, object]]:
        with self._lock:
            self._requests.append(request)
            if self._down:
                return 503, {"error": "temporarily_unavailable"}
        if request.method == "GET" and request.path == METADATA_PATH:
            return 200, {"issuer": self.url, "token_endpoint": self.url + TOKEN_PATH}
        if request.method != "POST" or request.path != TOKEN_PATH:
            return 404, {"error": "not_found"}
        form = request.form
        if form.get("grant_type") != "client_credentials":
            return 400, {"error": "unsupported_grant_type"}
        if (form.get("client_id"), form.get("client_secret")) != (
            self.client_id,
            self.client_secret,
        ):
            return 401, {"error": "invalid_client", "error_description": "bad client credentials"}
        with self._lock:
            token = f"oauth-token-{len(self._issued) + 1}"
            self._issued.append(token)
        if self.on_issue is not None:
            self.on_issue(token)
        answer: dict[str, object] = {"access_token": token, "token_type": "Bearer"}
        if self.expires_in is not None:
            answer["expires_in"] = self.expires_in
        return 200, answer

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode() if length else ""
                request = Request(
                    self.command,
                    self.path,
                    self.headers.get("Content-Type", ""),
                    dict(urllib.parse.parse_qsl(body)),
                )
                status, answer = issuer._answer(request)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _serve

            def log_message(self, format: str, *args: object) -> None:
                pass  # quiet: pytest shows what the tests assert

        return Handler
