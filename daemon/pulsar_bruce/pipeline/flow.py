"""A message's whole way, in one object: read -> admit -> journal -> batch -> frame ->
send -> receipt -> outcome.

========  ==============================  =========================================
read      ``DatagramReader.drain``        a slab from the socket (``input/``)
admit     ``Intake.admit_datagrams``      validated, routed, appended or discarded
journal   ``Pipeline.after_slab``         ``JournalCalls.sync``, before the slab leaves
batch     ``TopicManager.flush_dirty``    after a drain: the batches it sealed
frame     ``ProducerDriver.flush``        ``PartitionProducer.frames_to_send``
send      ``BrokerConnection.writelines`` one write per broker connection
receipt   ``BrokerAnswers.on_receipt``    the receipt matched to its batch
outcome   ``Outcomes.acked``              or ``Outcomes.discarded``, with a reason
========  ==============================  =========================================

(docs/design.md opens with the same table, with each function's module.)  Every
stage is built once by ``stages.py``, each after the stages it calls (its docstring
gives the order).  The journal is called by the pipeline only, through
``journalling.py``: after a slab, before framing (the drivers' hook), on settle.
The shutdown runs the path to
its end (:meth:`Pipeline.stop_reading`, :meth:`seal_all`, :meth:`settle`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import time
from collections.abc import Callable

from pulsar_bruce.config import Config
from pulsar_bruce.connection.security import ConnectionSecurity
from pulsar_bruce.input.socket_reader import DatagramReader, datagram_reader
from pulsar_bruce.input.stream_server import StreamServer
from pulsar_bruce.input.stream_session import RecordBudget
from pulsar_bruce.model.ledger import Ledger
from pulsar_bruce.parse.deliver_at import epoch_ms
from pulsar_bruce.pipeline import stages
from pulsar_bruce.pipeline.journalling import JournalCalls, JournalledWriter
from pulsar_bruce.route.appender import Appender
from pulsar_bruce.route.outcomes import BatchObserver
from pulsar_bruce.route.sequenced import SequencedSender
from pulsar_bruce.route.topic_settings import TopicConfigurator
from pulsar_bruce.service import shutdown
from pulsar_bruce.topics.manager import TopicChanges

log = logging.getLogger(__name__)
#: How often the journal records what settled (``Journal.tick``).
JOURNAL_TICK_S = 1.0


class Pipeline:
    """Owns every stage of the data path, and drives them for both sockets."""

    def __init__(
        self,
        config: Config,
        ledger: Ledger,
        security: ConnectionSecurity,
        observer: BatchObserver | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = epoch_ms,
    ):
        self.config = config
        self.ledger = ledger
        #: Now, in seconds (timeouts, ticks, latencies) and in epoch ms (timestamps): the
        #: clocks every stage is given.
        self.clock, self.wall_ms = clock, wall_ms
        self.pool = stages.send_stage(config, security)
        self.journal = stages.journal_stage(config)
        self.outcomes = stages.outcome_stage(config, ledger, observer)
        self.store = stages.spool_store(config)
        self.policy = stages.spool_policy(config, ledger, self.store, self.outcomes)
        self.topic_settings = TopicConfigurator(config)
        self.registry = stages.topic_registry(self.topic_settings)
        self.appender = Appender()
        #: What the topic manager did that the journal must know: it adds, the journal
        #: calls take (after a slab, before framing, on settle).
        self.changes = TopicChanges()
        self.journal_calls = JournalCalls(self.journal, self.changes, self.outcomes)
        self.manager = stages.batch_stage(
            config, self.pool, self.outcomes, self.topic_settings, self.journal_calls,
            self.registry, self.appender, self.changes, clock, wall_ms,
        )  # fmt: skip
        #: After a drain or a replay: taken, journalled, then written.
        self.writer = JournalledWriter(self.manager, self.journal_calls)
        self.intake = stages.admit_stage(
            self.registry, self.appender, ledger, self.policy, self.outcomes,
            self.topic_settings, wall_ms,
        )  # fmt: skip
        self.spooler = stages.spooler_stage(
            self.store, self.policy, self.intake, self.pool, self.writer, clock
        )
        #: Where the disk refuses a write, memory keeps what it has room for.
        self._into_memory = functools.partial(self.intake.replay_datagram, previous_run=False)
        #: The read stage, built at start (it needs the sockets).
        self.reader: DatagramReader | None = None
        self.stream_server: StreamServer | None = None
        self._spooling: asyncio.Task[None] | None = None
        self._journal_ticks: asyncio.Task[None] | None = None

    # -- the path -------------------------------------------------------------------------

    def after_slab(self, consume: tuple[int, int] | None) -> None:
        """A slab was admitted: what it did taken (new topics, batches opened and sealed),
        journalled, then (``consume``: socket fd, datagrams peeked) off the socket's queue."""
        self.manager.collect()
        self.journal_calls.sync(consume)

    async def tick_journal(self) -> None:
        """About once a second, the journal records what settled meanwhile and frees the
        segments it no longer needs (``Journal.tick``; a write it could not make is retried
        with its next one)."""
        while True:
            await asyncio.sleep(JOURNAL_TICK_S)
            try:
                self.journal_calls.tick()
            except OSError as exc:  # a new segment it could not open: the next tick tries
                log.error("journal: %s", exc)

    def after_drain(self) -> None:
        """A drain ended: the spool's held datagrams to disk, what the drain did journalled,
        the full batches to brokers."""
        self.policy.write_held(self._into_memory)
        self.writer.flush_dirty()

    def datagram_reader_for(self, sock: socket.socket) -> DatagramReader:
        """The read stage of the datagram socket (compiled or Python: the intake's kind),
        which hands each slab to the intake and tells this pipeline (its ``ReadStage``)
        where slabs and drains end; with the write-ahead journal it peeks, and a slab
        leaves the socket once :meth:`after_slab` has journalled it."""
        intake = self.intake
        return datagram_reader(
            sock,
            intake.admit,
            self,
            intake.max_message_bytes,
            intake.admit_datagrams,
            journalled=self.journal.write_ahead,
            batch_delay_ms=self.config.batch_max_delay_ms,
        )

    def stream_server_at(self, path: str, max_connections: int) -> StreamServer:
        """The stream socket's read stage: records go the same way, ``budget``-bounded; it
        tells this pipeline (its ``StreamStage``) when records were taken, and asks it for a
        Producer record's :meth:`sequenced_sender`."""
        config, intake, ledger = self.config, self.intake, self.ledger
        budget = RecordBudget(intake, config.buffer_max_bytes, ledger)
        return StreamServer(
            path,
            config.socket_mode,
            intake,
            self,
            group=config.socket_group,
            max_connections=max_connections,
            budget=budget,
        )

    def sequenced_sender(self, name: str, first_sequence_id: int) -> SequencedSender:
        """A stream connection that began with a Producer record: its messages go under
        that name and ids, on producers of their own (exactly once across retries)."""
        return SequencedSender(self.intake, self.manager, name, first_sequence_id)

    # -- start and stop -----------------------------------------------------------------------

    async def start(
        self,
        datagram_socket: socket.socket,
        stream_socket: socket.socket | None,
        stream_max_connections: int,
    ) -> None:
        """What a crash left first (the journal), then read both sockets, replay the spool
        and look topics up."""
        self.intake.replay_journal(self.journal.open())
        self.manager.collect()  # its topics looked up ...
        self.journal_calls.sync()  # ... and journalled before the old goes
        self.journal.drop_previous()
        self.reader = self.datagram_reader_for(datagram_socket)
        self.reader.start()
        stream_path = self.config.stream_socket_path
        if stream_path is not None or stream_socket is not None:
            self.stream_server = self.stream_server_at(stream_path or "", stream_max_connections)
            await self.stream_server.start(stream_socket)
        loop = asyncio.get_running_loop()
        if self.spooler is not None:
            self.spooler.open()
            self._spooling = loop.create_task(self.spooler.run())
        self._journal_ticks = loop.create_task(self.tick_journal())
        self.manager.start()

    def stop_reading(self, refuse_new: bool) -> None:
        """Shutdown, step 1: take what senders queued, then read nothing more; what is on
        disk stays there for the next start."""
        if self.reader is not None:
            self.reader.close_after_final_drain(refuse_new=refuse_new)
        if self.stream_server is not None:
            self.stream_server.stop_reading()
        if self.spooler is not None:
            self.spooler.stop_replaying()

    def seal_all(self) -> None:
        """Shutdown, step 2: every held datagram to disk, every open batch sealed and sent."""
        self.policy.write_held(self._into_memory)
        self.manager.seal_all()

    async def settle(self, timeout_s: float, stop_now: asyncio.Event) -> None:
        """Shutdown, step 3: wait for receipts (``timeout_s``, or until ``stop_now``); the
        rest to the spool, or discarded; the journal goes once all of it is settled."""
        ledger = self.ledger
        await shutdown.wait_for_receipts(
            ledger, timeout_s, stop_now, self.spooler is not None, self.clock
        )
        shutdown.keep_or_discard_the_rest(
            self.manager.registry, ledger, self.outcomes, self.spooler, stop_now.is_set()
        )
        self.journal.close()  # all of it is acked, spooled or discarded now

    async def stop(self) -> None:
        """Shutdown, last step: producers, broker connections and the stream socket closed."""
        for task in (self._spooling, self._journal_ticks):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self.manager.stop()
        self.pool.close_all()
        if self.stream_server is not None:
            await self.stream_server.stop()
