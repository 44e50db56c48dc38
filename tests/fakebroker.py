"""A scripted fake Pulsar broker, for the cases a real broker cannot be made to do.

A real broker (pulsar-lite) cannot be told to redirect a lookup, to answer
with ``proxy_through_service_url``, to close a producer, to lose or garble a
receipt, or to drop every connection at a chosen moment.  This one can.  It
speaks just enough of the binary protocol for one producer client (Connect,
Ping/Pong, PartitionedTopicMetadata, LookupTopic, Producer, CloseProducer,
Send) and is built on the daemon's own sans-IO codec, so it exercises the same
framing in the other direction.

It runs an asyncio TCP server on ``127.0.0.1`` in a background thread with its
own event loop.  Everything it receives is recorded (thread-safely) for tests
to inspect; the fault hooks are called from the test thread.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from pulsar_bruce.batch.compression import decompress
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import Frame, FrameDecoder, encode_command

_T = pb.BaseCommand
_Lookup = pb.CommandLookupTopicResponse
_U32 = struct.Struct(">I")


@dataclass(frozen=True)
class LookupAnswer:
    """How the fake answers one LookupTopic.  ``broker_url`` None means this broker."""

    broker_url: str | None = None
    redirect: bool = False
    authoritative: bool = True
    proxy_through_service_url: bool = False

    @classmethod
    def redirect_to(cls, url: str, authoritative: bool = True) -> LookupAnswer:
        return cls(url, redirect=True, authoritative=authoritative)


@dataclass(frozen=True)
class Lookup:
    conn: int
    topic: str
    authoritative: bool


@dataclass(frozen=True)
class ProducerRequest:
    conn: int
    topic: str
    producer_id: int
    requested_name: str | None  # what the client asked for (None: let the broker pick)
    assigned_name: str


@dataclass(frozen=True)
class Sent:
    """One Send frame (a batch) as received."""

    conn: int
    topic: str
    producer_name: str
    producer_id: int
    sequence_id: int
    highest_sequence_id: int
    num_messages: int
    values: tuple[bytes, ...]
    receipt: str  # "sent", "swallowed", "wrong", "error" or "duplicate"


@dataclass(frozen=True)
class Message:
    """One message out of a batch; ``sequence_id`` is the batch's plus its index."""

    conn: int
    topic: str
    producer_name: str
    sequence_id: int
    value: bytes
    key: str


def decode_batch(frame: Frame) -> list[tuple[str, bytes]]:
    """``(key, value)`` of every entry ``[u32 size][SingleMessageMetadata][value]``."""
    md = frame.metadata
    assert md is not None, "Send without a payload section"
    data = decompress(md.compression, frame.payload, md.uncompressed_size)
    entries = []
    offset = 0
    for _ in range(md.num_messages_in_batch):
        (size,) = _U32.unpack_from(data, offset)
        single = pb.SingleMessageMetadata()
        single.ParseFromString(data[offset + 4 : offset + 4 + size])
        start = offset + 4 + size
        entries.append((single.partition_key, data[start : start + single.payload_size]))
        offset = start + single.payload_size
    assert offset == len(data), f"{len(data) - offset} bytes left after the batch entries"
    return entries


class _Conn:
    """One client connection: its writer and the producers registered on it."""

    def __init__(self, conn_id: int, writer: asyncio.StreamWriter):
        self.id = conn_id
        self.writer = writer
        self.producers: dict[int, tuple[str, str]] = {}  # producer_id -> (topic, name)

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
        unique_producer_names: bool = False,
        deduplication: bool = False,
    ):
        self.partitions = partitions
        #: Broker deduplication, as the Java broker's MessageDeduplication (see _deduplicate).
        self.deduplication = deduplication
        #: (topic, producer name) -> highest sequence id stored (deduplication only).
        self._highest_sequence_ids: dict[tuple[str, str], int] = {}
        #: Refuse a producer name already connected to the topic (see _producer_reply).
        self.unique_producer_names = unique_producer_names
        self.last_sequence_id = last_sequence_id
        self.max_message_size = max_message_size  # announced in Connected when set
        #: A LookupAnswer, or a callable ``(Lookup) -> LookupAnswer``.
        self.lookup: LookupAnswer | Callable[[Lookup], LookupAnswer] = LookupAnswer()
        #: topic (full partition name) -> ServerError code answered to its Producer command.
        self.refuse_producers: dict[str, int] = {}
        #: topic -> ServerError code answered to its PartitionedTopicMetadata request.
        self.refuse_metadata: dict[str, int] = {}
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
        self._producers_released: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # records
        self._commands: list[tuple[int, str]] = []
        self._connects: list[tuple[int, pb.CommandConnect]] = []
        self._lookups: list[Lookup] = []
        self._producer_requests: list[ProducerRequest] = []
        self._sends: list[Sent] = []
        self._messages: list[Message] = []
        self._errors: list[str] = []

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

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

    def fail_sends(self, error: int, count: int = 1) -> None:
        """Answer the next ``count`` sends with ``SendError(error)`` (a ``pb.ServerError``)."""
        with self._lock:
            self._errors_to_send = [error] * count

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

    def close_producer(self, topic: str) -> int:
        """Send CloseProducer for every producer of ``topic``; returns how many."""

        async def close() -> int:
            closed = 0
            for conn in self._conns.values():
                for producer_id, (producer_topic, _) in list(conn.producers.items()):
                    if producer_topic == topic:
                        del conn.producers[producer_id]
                        command = _T(type=_T.CLOSE_PRODUCER)
                        command.close_producer.producer_id = producer_id
                        command.close_producer.request_id = 0
                        conn.send(command)
                        closed += 1
            return closed

        return int(self._call(close()))

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

    # -- protocol ----------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Conn(next(self._conn_ids), writer)
        self._conns[conn.id] = conn
        decoder = FrameDecoder()
        try:
            while data := await reader.read(65536):
                for frame in decoder.feed(data):
                    self._handle(conn, frame)
        except ConnectionError:
            pass
        except Exception as exc:  # a protocol violation by the client: make it visible
            with self._lock:
                self._errors.append(f"connection {conn.id}: {exc!r}")
        finally:
            del self._conns[conn.id]
            writer.transport.abort()

    def _handle(self, conn: _Conn, frame: Frame) -> None:
        command = frame.command
        kind = command.type
        with self._lock:
            self._commands.append((conn.id, _T.Type.Name(kind)))
        if kind == _T.CONNECT:
            with self._lock:
                self._connects.append((conn.id, _copy(command.connect)))
            reply = _T(type=_T.CONNECTED)
            reply.connected.server_version = "fake-broker"
            reply.connected.protocol_version = command.connect.protocol_version
            if self.max_message_size is not None:
                reply.connected.max_message_size = self.max_message_size
        elif kind == _T.PING:
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
        elif kind == _T.PRODUCER:  # answered by a task: it may be held
            task = asyncio.get_running_loop().create_task(
                self._producer_reply(conn, _copy(command.producer))
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        elif kind == _T.CLOSE_PRODUCER:
            conn.producers.pop(command.close_producer.producer_id, None)
            reply = _T(type=_T.SUCCESS)
            reply.success.request_id = command.close_producer.request_id
        elif kind == _T.SEND:
            self._on_send(conn, frame)
            return
        else:
            return  # PONG, and anything a producer client needs no answer to
        conn.send(reply)

    def _lookup_reply(self, conn: _Conn, request: pb.CommandLookupTopic) -> pb.BaseCommand:
        lookup = Lookup(conn.id, request.topic, request.authoritative)
        with self._lock:
            self._lookups.append(lookup)
            script = self.lookup
        answer = script(lookup) if callable(script) else script
        reply = _T(type=_T.LOOKUP_RESPONSE)
        response = reply.lookupTopicResponse
        response.request_id = request.request_id
        response.brokerServiceUrl = answer.broker_url or self.url
        response.response = _Lookup.Redirect if answer.redirect else _Lookup.Connect
        response.authoritative = answer.authoritative
        response.proxy_through_service_url = answer.proxy_through_service_url
        return reply

    async def _producer_reply(self, conn: _Conn, request: pb.CommandProducer) -> None:
        assert self._producers_released is not None
        requested = request.producer_name if request.HasField("producer_name") else None
        name = requested or f"fake-{self.port}-{next(self._names)}"
        with self._lock:
            self._producer_requests.append(
                ProducerRequest(conn.id, request.topic, request.producer_id, requested, name)
            )
        await self._producers_released.wait()
        refusal = self.refuse_producers.get(request.topic)
        message = "refused by the fake broker"
        if refusal is None and requested is not None and self._name_taken(conn, request):
            # The Java broker (AbstractTopic.tryOverwriteOldProducer): a name held on the topic
            # by another producer whose connection is alive is a NamingException -> ProducerBusy;
            # only the same producer id on the same connection (a re-creation) replaces it.
            refusal = pb.ProducerBusy
            message = f"Producer with name '{requested}' is already connected to topic"
        if refusal is not None:
            error = _T(type=_T.ERROR)
            error.error.request_id = request.request_id
            error.error.error = refusal  # type: ignore[assignment]
            error.error.message = message
            conn.send(error)
            return
        conn.producers[request.producer_id] = (request.topic, name)
        reply = _T(type=_T.PRODUCER_SUCCESS)
        reply.producer_success.request_id = request.request_id
        reply.producer_success.producer_name = name
        last = self.last_sequence_id
        if self.deduplication:  # Java: topic.getLastPublishedSequenceId(producerName)
            with self._lock:
                last = self._highest_sequence_ids.get((request.topic, name), -1)
        reply.producer_success.last_sequence_id = last
        conn.send(reply)

    def _name_taken(self, conn: _Conn, request: pb.CommandProducer) -> bool:
        if not self.unique_producer_names:
            return False
        for other in self._conns.values():
            for producer_id, held in other.producers.items():
                same = other is conn and producer_id == request.producer_id
                if held == (request.topic, request.producer_name) and not same:
                    return True
        return False

    def _on_send(self, conn: _Conn, frame: Frame) -> None:
        send = frame.command.send
        md = frame.metadata
        assert md is not None
        assert md.sequence_id == send.sequence_id, "metadata and command disagree"
        assert md.highest_sequence_id == send.highest_sequence_id
        assert md.num_messages_in_batch == send.num_messages
        topic, _ = conn.producers.get(send.producer_id, ("?", "?"))
        entries = decode_batch(frame)
        error = None
        with self._lock:
            if self._is_duplicate(topic, md.producer_name, send):
                outcome = "duplicate"
            elif self._errors_to_send:
                error = self._errors_to_send.pop()
                outcome = "error"
            elif self._wrong:
                self._wrong -= 1
                outcome = "wrong"
            elif self._swallow is None or self._swallow > 0:
                if self._swallow is not None:
                    self._swallow -= 1
                outcome = "swallowed"
            else:
                outcome = "sent"
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
                )
            )
            if outcome != "duplicate":  # stored
                self._messages.extend(
                    Message(conn.id, topic, md.producer_name, send.sequence_id + i, value, key)
                    for i, (key, value) in enumerate(entries)
                )
        if outcome == "swallowed":
            return
        if error is not None:
            reply = _T(type=_T.SEND_ERROR)
            reply.send_error.producer_id = send.producer_id
            reply.send_error.sequence_id = send.sequence_id
            reply.send_error.error = error  # type: ignore[assignment]
            reply.send_error.message = "scripted by the fake broker"
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
        conn.send(reply)

    def _is_duplicate(self, topic: str, producer_name: str, send: pb.CommandSend) -> bool:
        """The Java broker's ``MessageDeduplication.isDuplicate`` (call with the lock held).

        A batch whose ``sequence_id`` is at most the highest sequence id stored for
        its producer name on the topic is a duplicate: not stored, answered with a
        receipt for message id -1:-1.  Otherwise the highest id becomes
        ``max(highest_sequence_id, sequence_id)``.  (The Java broker answers "unknown"
        for ids pushed but not yet persisted; this fake stores at once, so every id
        it has seen is persisted.)  Scripted errors are not stored, so not recorded.
        """
        if not self.deduplication:
            return False
        highest = self._highest_sequence_ids.get((topic, producer_name))
        if highest is not None and send.sequence_id <= highest:
            return True
        if not self._errors_to_send:
            top = max(send.highest_sequence_id, send.sequence_id)
            self._highest_sequence_ids[(topic, producer_name)] = top
        return False


def _copy(message: Any) -> Any:
    copy = type(message)()
    copy.CopyFrom(message)
    return copy
