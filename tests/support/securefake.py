"""Test certificates (made with the ``openssl`` CLI) and a small fake broker with TLS and tokens.

:func:`make_pki` writes a CA, server certificates (one for 127.0.0.1/localhost,
one for another name) and a client certificate into a directory.

:class:`SecureFakeBroker` speaks just enough of the Pulsar binary protocol for
one producer client (Connect, AuthChallenge/AuthResponse, Ping/Pong,
PartitionedTopicMetadata, LookupTopic, Producer, Send), optionally behind TLS
(``ssl_context``, a server context) and optionally checking a token: a wrong
one is answered ``Error(AuthenticationError)`` and the connection closed, as a
Pulsar broker does.  It runs on its own event loop in a background thread and
records what it sees, thread-safely.  It is separate from ``fakebroker.py`` on
purpose: that one scripts producer-side faults, this one the connection's security.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
import subprocess
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import FrameDecoder, encode_command

from tests.support.fakebroker import decode_batch

_T = pb.BaseCommand


# -- certificates ------------------------------------------------------------------------------


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


# -- the fake broker ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Credentials:
    conn: int
    method: str
    data: bytes
    how: str  # "connect" or "auth_response"


class _Conn:
    def __init__(self, conn_id: int, writer: asyncio.StreamWriter):
        self.id = conn_id
        self.writer = writer
        self.ready = False
        self.peer_cert: dict[str, Any] | None = None

    def send(self, command: pb.BaseCommand) -> None:
        if not self.writer.is_closing():
            self.writer.write(encode_command(command))


class SecureFakeBroker:
    """See the module docstring.  ``start()``, use ``.url``, ``stop()``."""

    def __init__(
        self,
        ssl_context: ssl.SSLContext | None = None,
        tokens: set[bytes] | None = None,
        challenge: bool = False,
    ):
        self.ssl_context = ssl_context
        #: Accepted tokens; None: no authentication required.
        self.tokens = tokens
        #: Answer Connect with an AuthChallenge first (a multi-stage method's handshake).
        self.challenge = challenge
        self.port = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._conns: dict[int, _Conn] = {}
        self._conn_ids = itertools.count(1)
        self._entry_ids = itertools.count()
        self.accepted = 0  # TCP connections, before any TLS
        self._tls_failures: list[str] = []
        self._credentials: list[Credentials] = []
        self._rejected = 0
        self._values: list[bytes] = []
        self._peer_certs: list[dict[str, Any]] = []
        self._errors: list[str] = []

    @property
    def url(self) -> str:
        scheme = "pulsar+ssl" if self.ssl_context else "pulsar"
        return f"{scheme}://127.0.0.1:{self.port}"

    def start(self) -> SecureFakeBroker:
        started = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._server = loop.run_until_complete(
                asyncio.start_server(self._serve, "127.0.0.1", 0)
            )
            self.port = self._server.sockets[0].getsockname()[1]
            started.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="secure-fake-broker", daemon=True)
        self._thread.start()
        started.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return

        async def shutdown() -> None:
            assert self._server is not None
            self._server.close()
            for conn in list(self._conns.values()):
                conn.writer.transport.abort()

        self._call(shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop = None

    def _call(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        assert self._loop is not None, "broker not started"
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)

    # -- hooks (from the test thread) ----------------------------------------------------------

    def drop_connections(self) -> int:
        async def drop() -> int:
            conns = list(self._conns.values())
            for conn in conns:
                conn.writer.transport.abort()
            return len(conns)

        return int(self._call(drop()))

    def challenge_all(self) -> int:
        """Ask every ready connection for fresh credentials (``auth_data`` "refresh")."""

        async def challenge() -> int:
            ready = [conn for conn in self._conns.values() if conn.ready]
            for conn in ready:
                conn.send(_challenge())
            return len(ready)

        return int(self._call(challenge()))

    # -- records -------------------------------------------------------------------------------

    def tls_failures(self) -> list[str]:
        with self._lock:
            return list(self._tls_failures)

    def credentials(self) -> list[Credentials]:
        with self._lock:
            return list(self._credentials)

    def rejected(self) -> int:
        with self._lock:
            return self._rejected

    def values(self) -> list[bytes]:
        with self._lock:
            return list(self._values)

    def peer_certs(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._peer_certs)

    def errors(self) -> list[str]:
        with self._lock:
            return list(self._errors)

    # -- protocol ------------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with self._lock:
            self.accepted += 1
        if self.ssl_context is not None:
            try:
                await writer.start_tls(self.ssl_context)
            except (ssl.SSLError, OSError) as exc:
                with self._lock:
                    self._tls_failures.append(repr(exc))
                writer.transport.abort()
                return
            peer = writer.get_extra_info("peercert")
            if peer:
                with self._lock:
                    self._peer_certs.append(peer)
        conn = _Conn(next(self._conn_ids), writer)
        self._conns[conn.id] = conn
        decoder = FrameDecoder()
        refused = False
        try:
            while not refused and (data := await reader.read(65536)):
                for frame in decoder.feed(data):
                    if not self._handle(conn, frame.command, frame):
                        refused = True  # the Error goes out, then the connection closes
                        break
        except (ConnectionError, ssl.SSLError):
            pass
        except Exception as exc:  # a protocol violation by the client: make it visible
            with self._lock:
                self._errors.append(f"connection {conn.id}: {exc!r}")
        finally:
            self._conns.pop(conn.id, None)
            if refused:
                writer.close()
            else:
                writer.transport.abort()

    def _check(self, conn: _Conn, method: str, data: bytes, how: str) -> bool:
        """Record the credentials; a wrong token gets Error(AuthenticationError)."""
        with self._lock:
            self._credentials.append(Credentials(conn.id, method, data, how))
        if self.tokens is None or (method == "token" and data in self.tokens):
            return True
        with self._lock:
            self._rejected += 1
        reply = _T(type=_T.ERROR)
        reply.error.request_id = 0
        reply.error.error = pb.AuthenticationError
        reply.error.message = "Failed to authenticate: invalid token"
        conn.send(reply)
        return False

    def _connected(self, conn: _Conn, protocol_version: int) -> None:
        conn.ready = True
        reply = _T(type=_T.CONNECTED)
        reply.connected.server_version = "secure-fake-broker"
        reply.connected.protocol_version = protocol_version
        conn.send(reply)

    def _handle(self, conn: _Conn, command: pb.BaseCommand, frame: Any) -> bool:
        """Answer one command; False closes the connection."""
        kind = command.type
        if kind == _T.CONNECT:
            c = command.connect
            if self.challenge:
                with self._lock:
                    self._credentials.append(
                        Credentials(conn.id, c.auth_method_name, c.auth_data, "connect")
                    )
                conn.send(_challenge())
                return True
            if not self._check(conn, c.auth_method_name, c.auth_data, "connect"):
                return False
            self._connected(conn, c.protocol_version)
            return True
        if kind == _T.AUTH_RESPONSE:
            response = command.authResponse.response
            if not self._check(
                conn, response.auth_method_name, response.auth_data, "auth_response"
            ):
                return False
            if not conn.ready:
                self._connected(conn, command.authResponse.protocol_version)
            return True
        if not conn.ready:
            raise AssertionError(f"{_T.Type.Name(kind)} before Connected")
        if kind == _T.PING:
            reply = _T(type=_T.PONG)
            reply.pong.SetInParent()
        elif kind == _T.PARTITIONED_METADATA:
            reply = _T(type=_T.PARTITIONED_METADATA_RESPONSE)
            reply.partitionMetadataResponse.request_id = command.partitionMetadata.request_id
            reply.partitionMetadataResponse.partitions = 0
            reply.partitionMetadataResponse.response = (
                pb.CommandPartitionedTopicMetadataResponse.Success
            )
        elif kind == _T.LOOKUP:
            reply = _T(type=_T.LOOKUP_RESPONSE)
            answer = reply.lookupTopicResponse
            answer.request_id = command.lookupTopic.request_id
            answer.brokerServiceUrl = f"pulsar://127.0.0.1:{self.port}"
            answer.brokerServiceUrlTls = f"pulsar+ssl://127.0.0.1:{self.port}"
            answer.response = pb.CommandLookupTopicResponse.Connect
            answer.authoritative = True
        elif kind == _T.PRODUCER:
            reply = _T(type=_T.PRODUCER_SUCCESS)
            reply.producer_success.request_id = command.producer.request_id
            reply.producer_success.producer_name = (
                command.producer.producer_name or f"secure-{command.producer.producer_id}"
            )
        elif kind == _T.CLOSE_PRODUCER:
            reply = _T(type=_T.SUCCESS)
            reply.success.request_id = command.close_producer.request_id
        elif kind == _T.SEND:
            send = command.send
            entries = decode_batch(frame)
            with self._lock:
                self._values.extend(value for _, value in entries)
            reply = _T(type=_T.SEND_RECEIPT)
            reply.send_receipt.producer_id = send.producer_id
            reply.send_receipt.sequence_id = send.sequence_id
            reply.send_receipt.highest_sequence_id = send.highest_sequence_id
            reply.send_receipt.message_id.ledgerId = 1
            reply.send_receipt.message_id.entryId = next(self._entry_ids)
        else:
            return True
        conn.send(reply)
        return True


def _challenge() -> pb.BaseCommand:
    command = _T(type=_T.AUTH_CHALLENGE)
    command.authChallenge.server_version = "secure-fake-broker"
    command.authChallenge.challenge.auth_method_name = "token"
    command.authChallenge.challenge.auth_data = b"refresh"
    command.authChallenge.protocol_version = pb.v20
    return command
