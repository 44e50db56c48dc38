"""The daemon's data flow in one object: sockets, intake, journal, batches, brokers.

A reader takes a slab from a socket (up to 64 datagrams with one ``recvmmsg``, or a
stream connection's run of records) and hands it to the intake in one call
(``Intake.admit_datagrams``, ``admit_records``): each message is validated, routed and
appended to its partition's open batch, or spilled, or discarded with a reason
(``route/``).  After each slab the write-ahead journal writes what the slab added, and
only then is the slab taken off the socket (:meth:`Pipeline.after_slab`).  After each
drain (:meth:`Pipeline.after_drain`) the spool policy writes the datagrams it holds for
disk, and the topic manager writes the batches that filled up to their brokers
(``TopicManager.flush_dirty`` -> ``ProducerDriver.flush`` ->
``PartitionProducer.frames_to_send``).  Receipts come back on the broker connections and
end in ``route/outcomes.py``: acked, or discarded with a reason.
"""

from __future__ import annotations

import socket

from pulsar_bruce.input.socket_reader import DatagramReader, datagram_reader
from pulsar_bruce.input.stream_server import StreamServer
from pulsar_bruce.input.stream_session import RecordBudget
from pulsar_bruce.route.intake import Intake
from pulsar_bruce.route.sequenced import SequencedSender
from pulsar_bruce.spool.journal_stage import JournalStage
from pulsar_bruce.spool.policy import SpoolPolicy
from pulsar_bruce.topics.manager import TopicManager


class Pipeline:
    """Drives reading, admitting, journalling and flushing for both sockets."""

    def __init__(
        self, intake: Intake, policy: SpoolPolicy, topics: TopicManager, journal: JournalStage
    ):
        self.intake = intake
        self.policy = policy
        self.topics = topics
        self.journal = journal

    def after_slab(self, consume: tuple[int, int] | None) -> None:
        """A slab was admitted: journal it, then (``consume``: socket fd, datagrams peeked)
        take it off the socket's queue."""
        self.journal.sync(consume)

    def after_drain(self) -> None:
        """A drain ended: the spool's held datagrams to disk, the full batches to brokers."""
        self.policy.write_held()
        self.topics.flush_dirty()

    def datagram_reader(self, sock: socket.socket) -> DatagramReader:
        """The reader for the datagram socket (compiled or Python: the intake's kind)."""
        intake = self.intake
        return datagram_reader(
            sock,
            intake.admit,
            self.after_drain,
            intake.max_message_bytes,
            intake.admit_datagrams,
            journal_sync=self.after_slab if self.journal.write_ahead else None,
        )

    def stream_server(
        self,
        path: str,
        mode: int,
        group: str | None,
        max_connections: int,
        buffer_max_bytes: int,
    ) -> StreamServer:
        """The stream socket's server: records go the same way, ``budget``-bounded."""
        intake, ledger = self.intake, self.intake.ledger
        budget = RecordBudget(
            lambda: intake.max_message_bytes, buffer_max_bytes, lambda: ledger.buffered_bytes
        )
        return StreamServer(
            path,
            mode,
            intake,
            self.after_drain,
            group=group,
            max_connections=max_connections,
            budget=budget,
            sequenced=self.sequenced_sender,
        )

    def sequenced_sender(self, name: str, first_sequence_id: int) -> SequencedSender:
        """A stream connection that began with a Producer record: its messages go under
        that name and ids, on producers of their own (exactly once across retries)."""
        return SequencedSender(self.intake, self.topics, name, first_sequence_id)
