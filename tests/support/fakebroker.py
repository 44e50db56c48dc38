"""A scripted fake Pulsar broker, for the cases a real broker cannot be made to do.

A real broker (pulsar-lite) cannot be told to redirect a lookup, to answer
with ``proxy_through_service_url``, to close a producer (naming the broker it
moved to, or not), to migrate a topic to another cluster, to lose or garble a
receipt, or to drop every connection at a chosen moment.  This one can, and
where pulsar-lite differs from the Java broker it does what the Java broker
does.  It speaks just enough of the binary protocol for one producer client
(Connect, AuthChallenge/AuthResponse, Ping/Pong, PartitionedTopicMetadata,
LookupTopic with advertised listeners, Producer, CloseProducer, TopicMigrated,
Send) and is built on the daemon's own sans-IO codec, so it exercises the same
framing in the other direction.

Optionally it sits behind TLS (``ssl_context``, a server context: see
``pki.py``) and checks a token (``tokens``) and/or, like a Java broker with
``AuthenticationProviderTls`` (``tls_auth``), that Connect names the ``"tls"``
method over a connection that presented a client certificate: anything else is
answered ``Error(AuthenticationError)`` and the connection closed, as a Pulsar
broker does (``ServerCnx.handleConnect``).

It runs an asyncio TCP server on ``127.0.0.1`` in a background thread with its
own event loop.  Everything it receives is recorded (thread-safely) for tests
to inspect; the fault hooks are called from the test thread.

Where pulsar-lite and the Java broker differ, it answers as the Java broker
(pulsar-broker ``ServerCnx``, ``Producer``, ``PersistentTopic``) does:

- a ``SendError`` names the batch by ``max(highest_sequence_id, sequence_id)``
  (``Producer.checkAndStartPublish``, ``MessagePublishContext.completed``);
- a batch over a topic's max-message-size policy fails with ``NotAllowedError``
  (``PersistentTopic.publishMessage``); a terminated topic fails sends and
  refuses producers with ``TopicTerminatedError``;
- ``CloseProducer`` is answered once the producer's held receipts are out
  (``Producer.close`` waits for pending publishes); closing a producer whose
  creation is still pending cancels it (``ServerCnx.handleCloseProducer``);
- a ``Producer`` for an id already on the connection gets the existing producer,
  or ``ServiceNotReady`` while that one is still being created
  (``ServerCnx.handleProducer``);
- a ``Send`` for a producer id the connection does not have is a protocol
  violation: recorded in :meth:`FakeBroker.errors` and the connection closed
  (``ServerCnx.handleSend``), unless the broker itself closed that producer;
- with ``deduplication``, Sends are judged as ``MessageDeduplication`` judges them
  (``fake_dedup.py``): by the producer's registered name, the last chunk of a
  chunked message, and pushed against persisted ids.  Held receipts are
  publishes still being persisted: until :meth:`FakeBroker.release_held_receipts`
  their resends get ``SendError(PersistenceError)``; persisted ones get a
  receipt for message id -1:-1 and are not stored.

A non-batched message (and each chunk of one) is read whole; a chunked message
shows in :meth:`FakeBroker.messages` once its last chunk is stored.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import Frame, FrameDecoder, encode_command

from tests.support.fake_dedup import Deduplication, DupStatus, Publish
from tests.support.fakewire import (
    Credentials,
    Lookup,
    LookupAnswer,
    Message,
    ProducerRequest,
    Sent,
    copy_message,
    decode_batch,
    decode_entries,
    stored_messages,
)

__all__ = [
    "Credentials",
    "FakeBroker",
    "Lookup",
    "LookupAnswer",
    "Message",
    "ProducerRequest",
    "Sent",
    "decode_batch",
]

_T = pb.BaseCommand
_Lookup = pb.CommandLookupTopicResponse


class _Conn:
    """One client connection: its writer and the producers registered on it."""

    def __init__(self, conn_id: int, writer: asyncio.StreamWriter):
        self.id = conn_id
        self.writer = writer
        self.producers: dict[int, tuple[str, str]] = {}  # producer_id -> (topic, name)
        self.ready = False  # Connected sent (after any authentication)
        self.peer_cert: dict[str, Any] | None = None  # the client certificate, over TLS
        #: producer_id -> request_id of its creation not answered yet; the request ids of
        #: creations the client closed meanwhile (never answered).
        self.creating: dict[int, int] = {}
        self.cancelled: set[int] = set()
        #: Producer ids the broker closed itself: their late sends are ignored.
        self.closed_by_broker: set[int] = set()
        #: Receipts withheld per producer id, in order (publishes still being persisted).
        self.held: dict[int, list[pb.BaseCommand]] = {}
        #: CloseProducer answers waiting for those receipts.
        self.closing: dict[int, pb.BaseCommand] = {}

    def send(self, command: pb.BaseCommand) -> None:
        if not self.writer.is_closing():
            self.writer.write(encode_command(command))


class FakeBroker:
    """See the module docstring.  ``start()``, use ``.url``, ``stop()``."""

    def __init__(
        self,
        partitions: int = 0,
        last_sequence_id: int = -1,
        max_message_size: int | None = None,
        ssl_context: ssl.SSLContext | None = None,
        tokens: set[bytes] | None = None,
        challenge: bool = False,
        tls_auth: bool = False,
        unique_producer_names: bool = False,
        deduplication: bool = False,
    ):
        self.partitions = partitions
        #: Broker deduplication, as the Java broker's MessageDeduplication (``fake_dedup.py``).
        self.deduplication = deduplication
        self.dedup = Deduplication()  # held receipts: writes still being persisted
        self._chunks: dict[str, dict[int, bytes]] = {}  # uuid -> chunk id -> chunk stored
        #: Refuse a producer name already connected to the topic (see _name_taken).
        self.unique_producer_names = unique_producer_names
        self.last_sequence_id = last_sequence_id
        self.max_message_size = max_message_size  # announced in Connected when set
        #: A LookupAnswer, or a callable ``(Lookup) -> LookupAnswer``.
        self.lookup: LookupAnswer | Callable[[Lookup], LookupAnswer] = LookupAnswer()
        #: topic (full partition name) -> ServerError code answered to its Producer command.
        self.refuse_producers: dict[str, int] = {}
        #: topic -> ServerError code answered to its PartitionedTopicMetadata request.
        self.refuse_metadata: dict[str, int] = {}
        #: Advertised listener name -> the URL a lookup naming it is answered with.
        self.listeners: dict[str, str] = {}
        #: topic -> (brokerServiceUrl, brokerServiceUrlTls) of the cluster it migrated to.
        self._migrated: dict[str, tuple[str, str]] = {}
        #: TLS in front of the protocol when set.
        self.ssl_context = ssl_context
        #: Accepted tokens; None: no token provider.
        self.tokens = tokens
        #: The TLS provider: method "tls" and a client certificate authenticate.
        self.tls_auth = tls_auth
        #: Answer Connect with an AuthChallenge first (a multi-stage method's handshake).
        self.challenge = challenge
        self.accepted = 0  # TCP connections, before any TLS
        #: topic -> its max-message-size policy: larger entries fail with NotAllowedError.
        self.topic_max_message_size: dict[str, int] = {}
        #: Terminated topics: sends fail and producers are refused with TopicTerminatedError.
        self.terminated: set[str] = set()
        self.port = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._conns: dict[int, _Conn] = {}
        self._conn_ids = itertools.count(1)
        self._names = itertools.count(1)
        self._entry_ids = itertools.count()
        # scripted faults
        self._swallow: int | None = 0  # sends whose receipt is withheld; None: until released
        self._wrong = 0  # sends answered with a receipt for the wrong sequence id
        self._errors_to_send: list[int] = []  # sends answered with SendError(code)
        self._errors_topic: str | None = None  # ... only sends on this topic, when set
        self._hold_topics: set[str] = set()  # topics whose receipts are held back
        self._producers_released: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # records
        self._commands: list[tuple[int, str]] = []
        self._connects: list[tuple[int, pb.CommandConnect]] = []
        self._lookups: list[Lookup] = []
        self._producer_requests: list[ProducerRequest] = []
        self._closes: list[tuple[int, int]] = []  # (conn, producer_id) of client CloseProducers
        self._sends: list[Sent] = []
        self._messages: list[Message] = []
        self._errors: list[str] = []
        self._tls_failures: list[str] = []
        self._credentials: list[Credentials] = []
        self._rejected = 0
        self._peer_certs: list[dict[str, Any]] = []

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def url(self) -> str:
        scheme = "pulsar+ssl" if self.ssl_context else "pulsar"
        return f"{scheme}://127.0.0.1:{self.port}"

    def start(self) -> FakeBroker:
        started = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._producers_released = asyncio.Event()
            self._producers_released.set()
            self._server = loop.run_until_complete(
                asyncio.start_server(self._serve, "127.0.0.1", 0)
            )
            self.port = self._server.sockets[0].getsockname()[1]
            started.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="fake-broker", daemon=True)
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
        """Run ``coroutine`` on the broker's loop and wait for its result."""
        assert self._loop is not None, "broker not started"
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)

    # -- fault hooks (call from the test thread) ----------------------------------------

    def swallow_receipts(self, count: int | None = None) -> None:
        """Record the next ``count`` sends (all, if None) but never answer them."""
        with self._lock:
            self._swallow = count

    def release_receipts(self) -> None:
        """Answer sends again (the receipts already swallowed stay lost)."""
        with self._lock:
            self._swallow = 0

    def wrong_receipts(self, count: int = 1) -> None:
        """Answer the next ``count`` sends with the next batch's sequence id instead of theirs."""
        with self._lock:
            self._wrong = count

    def fail_sends(self, error: int, count: int = 1, topic: str | None = None) -> None:
        """Answer the next ``count`` sends (on ``topic`` only, if given) with
        ``SendError(error)`` (a ``pb.ServerError``)."""
        with self._lock:
            self._errors_to_send = [error] * count
            self._errors_topic = topic

    def hold_receipts(self, topic: str) -> None:
        """Withhold the receipts of ``topic``'s sends (as if persisting were slow) until
        :meth:`release_held_receipts`; errors are still answered at once."""
        with self._lock:
            self._hold_topics.add(topic)

    def release_held_receipts(self) -> int:
        """Send every held receipt, in order, then the CloseProducer answers that waited
        for them; returns how many receipts."""

        async def release() -> int:
            with self._lock:
                self._hold_topics.clear()
                self.dedup.persist_pending()
            released = 0
            for conn in self._conns.values():
                for producer_id, receipts in list(conn.held.items()):
                    for receipt in receipts:
                        conn.send(receipt)
                    released += len(receipts)
                    del conn.held[producer_id]
                    self._finish_close(conn, producer_id)
            return released

        return int(self._call(release()))

    def hold_producers(self) -> None:
        """Leave Producer requests unanswered until :meth:`release_producers`."""

        async def hold() -> None:
            assert self._producers_released is not None
            self._producers_released.clear()

        self._call(hold())

    def release_producers(self) -> None:
        async def release() -> None:
            assert self._producers_released is not None
            self._producers_released.set()

        self._call(release())

    def close_producer(self, topic: str, assigned_url: str | None = None) -> int:
        """Send CloseProducer for every producer of ``topic``; returns how many.

        ``assigned_url``: the broker the bundle was assigned to, as the extensible
        load manager's unload sends it (``assignedBrokerServiceUrl``).
        """

        async def close() -> int:
            closed = 0
            for conn in self._conns.values():
                for producer_id, (producer_topic, _) in list(conn.producers.items()):
                    if producer_topic == topic:
                        del conn.producers[producer_id]
                        conn.closed_by_broker.add(producer_id)
                        conn.send(_close_producer(producer_id, assigned_url))
                        closed += 1
            return closed

        return int(self._call(close()))

    def migrate_topic(self, topic: str, url: str, url_tls: str = "") -> int:
        """Blue-green migration of ``topic`` to the cluster at ``url``, as the Java broker does it.

        Each producer of the topic gets TopicMigrated then CloseProducer
        (``Producer.topicMigrated``); a producer created afterwards gets the same
        pair and no answer to its Producer command (``ServerCnx.buildProducerAndAddTopic``).
        Returns how many producers were told.
        """

        async def migrate() -> int:
            self._migrated[topic] = (url, url_tls)
            told = 0
            for conn in self._conns.values():
                for producer_id, (producer_topic, _) in list(conn.producers.items()):
                    if producer_topic == topic:
                        del conn.producers[producer_id]
                        self._send_migrated(conn, producer_id, topic)
                        told += 1
            return told

        return int(self._call(migrate()))

    def _send_migrated(self, conn: _Conn, producer_id: int, topic: str) -> None:
        url, url_tls = self._migrated[topic]
        command = _T(type=_T.TOPIC_MIGRATED)
        migrated = command.topicMigrated
        migrated.resource_id = producer_id
        migrated.resource_type = pb.CommandTopicMigrated.Producer
        migrated.brokerServiceUrl = url
        if url_tls:
            migrated.brokerServiceUrlTls = url_tls
        conn.send(command)
        conn.send(_close_producer(producer_id, None))

    def drop_connections(self) -> int:
        """Abort every client connection (no goodbye); returns how many."""

        async def drop() -> int:
            conns = list(self._conns.values())
            for conn in conns:
                conn.writer.transport.abort()
            return len(conns)

        return int(self._call(drop()))

    def ping(self) -> int:
        """Send Ping on every connection; the Pongs show up in :meth:`commands`."""

        async def ping() -> int:
            for conn in self._conns.values():
                command = _T(type=_T.PING)
                command.ping.SetInParent()
                conn.send(command)
            return len(self._conns)

        return int(self._call(ping()))

    def challenge_all(self) -> int:
        """Ask every ready connection for fresh credentials (``auth_data`` "refresh")."""

        async def challenge() -> int:
            ready = [conn for conn in self._conns.values() if conn.ready]
            for conn in ready:
                conn.send(_challenge())
            return len(ready)

        return int(self._call(challenge()))

    # -- records (copies, safe to read from any thread) ------------------------------------

    def commands(self, conn: int | None = None) -> list[str]:
        with self._lock:
            return [name for c, name in self._commands if conn is None or c == conn]

    def connects(self) -> list[tuple[int, pb.CommandConnect]]:
        with self._lock:
            return list(self._connects)

    def lookups(self) -> list[Lookup]:
        with self._lock:
            return list(self._lookups)

    def producer_requests(self) -> list[ProducerRequest]:
        with self._lock:
            return list(self._producer_requests)

    def closes(self) -> list[tuple[int, int]]:
        """``(conn, producer_id)`` of every CloseProducer the client sent."""
        with self._lock:
            return list(self._closes)

    def sends(self) -> list[Sent]:
        with self._lock:
            return list(self._sends)

    def messages(self) -> list[Message]:
        with self._lock:
            return list(self._messages)

    def errors(self) -> list[str]:
        """Protocol violations seen (bad framing, inconsistent Send); should stay empty."""
        with self._lock:
            return list(self._errors)

    def values(self) -> list[bytes]:
        return [m.value for m in self.messages()]

    def tls_failures(self) -> list[str]:
        with self._lock:
            return list(self._tls_failures)

    def credentials(self) -> list[Credentials]:
        with self._lock:
            return list(self._credentials)

    def rejected(self) -> int:
        """Connections refused for their credentials."""
        with self._lock:
            return self._rejected

    def peer_certs(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._peer_certs)

    # -- protocol ----------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with self._lock:
            self.accepted += 1
        if self.ssl_context is not None and not await self._start_tls(writer):
            return
        conn = _Conn(next(self._conn_ids), writer)
        conn.peer_cert = writer.get_extra_info("peercert") or None
        self._conns[conn.id] = conn
        decoder = FrameDecoder()
        refused = False
        try:
            while not refused and (data := await reader.read(65536)):
                for frame in decoder.feed(data):
                    if not self._handle(conn, frame):
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

    async def _start_tls(self, writer: asyncio.StreamWriter) -> bool:
        assert self.ssl_context is not None
        try:
            await writer.start_tls(self.ssl_context)
        except (ssl.SSLError, OSError) as exc:
            with self._lock:
                self._tls_failures.append(repr(exc))
            writer.transport.abort()
            return False
        peer = writer.get_extra_info("peercert")
        if peer:
            with self._lock:
                self._peer_certs.append(peer)
        return True

    def _check(self, conn: _Conn, method: str, data: bytes, how: str) -> bool:
        """Record the credentials; wrong ones get Error(AuthenticationError)."""
        with self._lock:
            self._credentials.append(Credentials(conn.id, method, data, how))
        if self.tokens is None and not self.tls_auth:
            return True  # authentication disabled
        if method == "token" and self.tokens is not None and data in self.tokens:
            return True
        if method == "tls" and self.tls_auth and conn.peer_cert:
            return True  # AuthenticationProviderTls: the role is the certificate's CN
        with self._lock:
            self._rejected += 1
        reply = _T(type=_T.ERROR)
        reply.error.request_id = 0
        reply.error.error = pb.AuthenticationError
        reply.error.message = "Failed to authenticate"  # ServerCnx.authenticationFailed
        conn.send(reply)
        return False

    def _connected(self, conn: _Conn, protocol_version: int) -> None:
        conn.ready = True
        reply = _T(type=_T.CONNECTED)
        reply.connected.server_version = "fake-broker"
        reply.connected.protocol_version = protocol_version
        if self.max_message_size is not None:
            reply.connected.max_message_size = self.max_message_size
        conn.send(reply)

    def _authenticate(self, conn: _Conn, command: pb.BaseCommand) -> bool:
        """Connect or AuthResponse; False closes the connection."""
        if command.type == _T.CONNECT:
            c = command.connect
            with self._lock:
                self._connects.append((conn.id, copy_message(c)))
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
        response = command.authResponse.response
        if not self._check(conn, response.auth_method_name, response.auth_data, "auth_response"):
            return False
        if not conn.ready:
            self._connected(conn, command.authResponse.protocol_version)
        return True

    def _handle(self, conn: _Conn, frame: Frame) -> bool:
        """Answer one command; False closes the connection."""
        command = frame.command
        kind = command.type
        with self._lock:
            self._commands.append((conn.id, _T.Type.Name(kind)))
        if kind in (_T.CONNECT, _T.AUTH_RESPONSE):
            return self._authenticate(conn, command)
        if not conn.ready:
            raise AssertionError(f"{_T.Type.Name(kind)} before Connected")
        if kind == _T.PING:
            reply = _T(type=_T.PONG)
            reply.pong.SetInParent()
        elif kind == _T.PARTITIONED_METADATA:
            reply = _T(type=_T.PARTITIONED_METADATA_RESPONSE)
            answer = reply.partitionMetadataResponse
            answer.request_id = command.partitionMetadata.request_id
            refusal = self.refuse_metadata.get(command.partitionMetadata.topic)
            if refusal is None:
                answer.partitions = self.partitions
                answer.response = pb.CommandPartitionedTopicMetadataResponse.Success
            else:
                answer.response = pb.CommandPartitionedTopicMetadataResponse.Failed
                answer.error = refusal  # type: ignore[assignment]
                answer.message = "refused by the fake broker"
        elif kind == _T.LOOKUP:
            reply = self._lookup_reply(conn, command.lookupTopic)
        elif kind == _T.PRODUCER:
            self._on_producer(conn, copy_message(command.producer))
            return True
        elif kind == _T.CLOSE_PRODUCER:
            self._on_close_producer(conn, command.close_producer)
            return True
        elif kind == _T.SEND:
            self._on_send(conn, frame)
            return True
        else:
            return True  # PONG, and anything a producer client needs no answer to
        conn.send(reply)
        return True

    def _lookup_reply(self, conn: _Conn, request: pb.CommandLookupTopic) -> pb.BaseCommand:
        listener = request.advertised_listener_name.strip() or None
        lookup = Lookup(conn.id, request.topic, request.authoritative, listener)
        with self._lock:
            self._lookups.append(lookup)
            script = self.lookup
        answer = script(lookup) if callable(script) else script
        reply = _T(type=_T.LOOKUP_RESPONSE)
        response = reply.lookupTopicResponse
        response.request_id = request.request_id
        own_url = f"pulsar://127.0.0.1:{self.port}"
        if listener is not None and answer.broker_url is None:
            # The Java broker answers with the named listener's URL, and fails a lookup
            # naming a listener it does not have (NamespaceService / LookupData).
            if listener not in self.listeners:
                response.response = _Lookup.Failed
                response.error = pb.ServiceNotReady
                response.message = f"the broker do not have {listener} listener"
                return reply
            own_url = self.listeners[listener]
        response.brokerServiceUrl = answer.broker_url or own_url
        if self.ssl_context is not None:
            response.brokerServiceUrlTls = answer.broker_url or self.url
        response.response = _Lookup.Redirect if answer.redirect else _Lookup.Connect
        response.authoritative = answer.authoritative
        response.proxy_through_service_url = answer.proxy_through_service_url
        return reply

    def _on_producer(self, conn: _Conn, request: pb.CommandProducer) -> None:
        producer_id = request.producer_id
        requested = request.producer_name if request.HasField("producer_name") else None
        existing = conn.producers.get(producer_id)
        name = existing[1] if existing else requested or f"fake-{self.port}-{next(self._names)}"
        with self._lock:
            self._producer_requests.append(
                ProducerRequest(conn.id, request.topic, producer_id, requested, name)
            )
        if producer_id in conn.creating:  # ServerCnx.handleProducer: an earlier one is pending
            conn.send(_error(request.request_id, pb.ServiceNotReady, "Producer is already present"))
        elif existing is not None:  # ... or done: the client gets that producer, not a new one
            conn.send(self._producer_success(request.request_id, name, -1))
        else:  # answered by a task: it may be held
            conn.creating[producer_id] = request.request_id
            task = asyncio.get_running_loop().create_task(
                self._create_producer(conn, request, name)
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _create_producer(self, conn: _Conn, request: pb.CommandProducer, name: str) -> None:
        assert self._producers_released is not None
        await self._producers_released.wait()
        producer_id = request.producer_id
        if request.request_id in conn.cancelled:  # closed by the client while pending: no answer
            conn.cancelled.discard(request.request_id)
            return
        if request.topic in self._migrated:
            del conn.creating[producer_id]
            self._send_migrated(conn, producer_id, request.topic)
            return
        del conn.creating[producer_id]
        refusal = self.refuse_producers.get(request.topic)
        message = "refused by the fake broker"
        if refusal is None and request.topic in self.terminated:
            refusal = pb.TopicTerminatedError
        named = request.HasField("producer_name")
        if refusal is None and named and self._name_taken(conn, request):
            # The Java broker (AbstractTopic.tryOverwriteOldProducer): a name held on the topic
            # by another producer whose connection is alive is a NamingException -> ProducerBusy;
            # only the same producer id on the same connection (a re-creation) replaces it.
            refusal = pb.ProducerBusy
            message = f"Producer with name '{request.producer_name}' is already connected to topic"
        if refusal is not None:
            conn.send(_error(request.request_id, refusal, message))
            return
        conn.producers[producer_id] = (request.topic, name)
        conn.closed_by_broker.discard(producer_id)
        last = self.last_sequence_id
        if self.deduplication:  # Producer.getLastSequenceId: the highest id *pushed*
            with self._lock:
                last = self.dedup.last_sequence_id(request.topic, name)
        conn.send(self._producer_success(request.request_id, name, last))

    def _name_taken(self, conn: _Conn, request: pb.CommandProducer) -> bool:
        if not self.unique_producer_names:
            return False
        for other in self._conns.values():
            for producer_id, held in other.producers.items():
                same = other is conn and producer_id == request.producer_id
                if held == (request.topic, request.producer_name) and not same:
                    return True
        return False

    @staticmethod
    def _producer_success(request_id: int, name: str, last_sequence_id: int) -> pb.BaseCommand:
        reply = _T(type=_T.PRODUCER_SUCCESS)
        reply.producer_success.request_id = request_id
        reply.producer_success.producer_name = name
        reply.producer_success.last_sequence_id = last_sequence_id
        return reply

    def _on_close_producer(self, conn: _Conn, request: pb.CommandCloseProducer) -> None:
        producer_id = request.producer_id
        with self._lock:
            self._closes.append((conn.id, producer_id))
        reply = _T(type=_T.SUCCESS)
        reply.success.request_id = request.request_id
        if producer_id in conn.creating:
            conn.cancelled.add(conn.creating.pop(producer_id))
        if conn.held.get(producer_id) and producer_id in conn.producers:
            conn.closing[producer_id] = reply  # answered when its held receipts are out
            return
        conn.producers.pop(producer_id, None)
        conn.send(reply)

    def _finish_close(self, conn: _Conn, producer_id: int) -> None:
        reply = conn.closing.pop(producer_id, None)
        if reply is not None:
            conn.producers.pop(producer_id, None)
            conn.send(reply)

    def _on_send(self, conn: _Conn, frame: Frame) -> None:
        send = frame.command.send
        md = frame.metadata
        assert md is not None
        assert md.sequence_id == send.sequence_id, "metadata and command disagree"
        assert md.highest_sequence_id == send.highest_sequence_id
        assert md.num_messages_in_batch == send.num_messages
        producer = conn.producers.get(send.producer_id)
        if producer is None:
            if send.producer_id not in conn.closed_by_broker:
                with self._lock:
                    self._errors.append(
                        f"connection {conn.id}: Send for producer {send.producer_id}, "
                        "which is not ready on this connection"
                    )
                conn.writer.transport.abort()
            return
        topic, name = producer
        entries = decode_entries(frame)
        publish = Publish.of(topic, name, frame)  # by the registered name, not the metadata's
        error = None
        with self._lock:
            dup = self.dedup.check(publish) if self.deduplication else DupStatus.NOT_DUP
            if send.producer_id in conn.closing:
                error, outcome = pb.PersistenceError, "error"  # "Producer is closed"
            elif topic in self.terminated:
                error, outcome = pb.TopicTerminatedError, "error"
            elif _entry_size(frame) > self.topic_max_message_size.get(topic, _UNLIMITED):
                error, outcome = pb.NotAllowedError, "error"
            elif dup is DupStatus.DUP:  # PersistentTopic.publishMessage: completed(null, -1, -1)
                outcome = "duplicate"
            elif dup is DupStatus.UNKNOWN:  # MessageDupUnknownException -> PersistenceError
                error, outcome = pb.PersistenceError, "unknown"
            elif self._errors_to_send and self._errors_topic in (None, topic):
                error, outcome = self._errors_to_send.pop(), "error"
            elif self._wrong:
                self._wrong -= 1
                outcome = "wrong"
            elif self._swallow is None or self._swallow > 0:
                if self._swallow is not None:
                    self._swallow -= 1
                outcome = "swallowed"
            elif topic in self._hold_topics:
                outcome = "held"
            else:
                outcome = "sent"
            if self.deduplication and error is None and outcome != "duplicate":
                self.dedup.written(publish, slow=outcome == "held")  # a failure pushes nothing
            # ServerCnx.handleSend takes the (lowest, highest) path when highest >= lowest;
            # errors then name the highest id, else the only one.
            batch_path = send.HasField("highest_sequence_id") and (
                send.sequence_id <= send.highest_sequence_id
            )
            error_id = send.highest_sequence_id if batch_path else send.sequence_id
            self._sends.append(
                Sent(
                    conn.id,
                    topic,
                    md.producer_name,
                    send.producer_id,
                    send.sequence_id,
                    send.highest_sequence_id,
                    send.num_messages,
                    tuple(value for _, value in entries),
                    outcome,
                    error,
                    error_id if error is not None else None,
                )
            )
            if outcome not in ("duplicate", "unknown"):  # stored
                self._messages.extend(stored_messages(conn.id, topic, frame, self._chunks))
        if outcome == "swallowed":
            return
        if error is not None:
            reply = _T(type=_T.SEND_ERROR)
            reply.send_error.producer_id = send.producer_id
            reply.send_error.sequence_id = error_id
            reply.send_error.error = error  # type: ignore[assignment]
            reply.send_error.message = (
                "Cannot determine whether the message is a duplicate at this time"
                if outcome == "unknown"
                else "scripted by the fake broker"
            )
            conn.send(reply)
            return
        reply = _T(type=_T.SEND_RECEIPT)
        receipt = reply.send_receipt
        receipt.producer_id = send.producer_id
        receipt.sequence_id = send.sequence_id
        receipt.highest_sequence_id = send.highest_sequence_id
        if outcome == "wrong":  # the next batch's id: a receipt the daemon must not skip ahead to
            receipt.sequence_id = send.highest_sequence_id + 1
            receipt.highest_sequence_id = send.highest_sequence_id + send.num_messages
        receipt.message_id.ledgerId = 1
        receipt.message_id.entryId = next(self._entry_ids)
        if outcome == "duplicate":  # Java: publishContext.completed(null, -1, -1)
            receipt.message_id.ledgerId = receipt.message_id.entryId = 2**64 - 1  # -1 as uint64
        if outcome == "held":
            conn.held.setdefault(send.producer_id, []).append(reply)
            return
        conn.send(reply)


def _close_producer(producer_id: int, assigned_url: str | None) -> pb.BaseCommand:
    """CloseProducer as the Java broker sends it: request_id -1 (``ServerCnx.closeProducer``)."""
    command = _T(type=_T.CLOSE_PRODUCER)
    command.close_producer.producer_id = producer_id
    command.close_producer.request_id = 2**64 - 1  # -1L as a uint64
    if assigned_url:
        command.close_producer.assignedBrokerServiceUrl = assigned_url
    return command



def _challenge() -> pb.BaseCommand:
    command = _T(type=_T.AUTH_CHALLENGE)
    command.authChallenge.server_version = "fake-broker"
    command.authChallenge.challenge.auth_method_name = "token"
    command.authChallenge.challenge.auth_data = b"refresh"
    command.authChallenge.protocol_version = pb.v20
    return command


_UNLIMITED = 1 << 62


def _entry_size(frame: Frame) -> int:
    """What ``PersistentTopic.isExceedMaximumMessageSize`` measures: the entry after the
    command (magic, checksum, metadata size, metadata, payload)."""
    assert frame.metadata is not None
    return 2 + 4 + 4 + frame.metadata.ByteSize() + len(frame.payload)


def _error(request_id: int, error: int, message: str) -> pb.BaseCommand:
    reply = _T(type=_T.ERROR)
    reply.error.request_id = request_id
    reply.error.error = error  # type: ignore[assignment]
    reply.error.message = message
    return reply

