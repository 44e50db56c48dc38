"""The message ledger: the counters behind the accounting identity, and their only writer.

Every message the daemon reads is, at any moment between two datagrams, in
exactly one of three states: acked, discarded (with a reason) or buffered (in
memory or in this run's disk spool).  Each method below moves messages between
those states and updates both sides at once, so

    ``received == acked + sum(discarded.values()) + buffered_messages``

holds by construction.  No other module writes these counters; metrics, status
and systemd notifications only read them.
"""

from __future__ import annotations

from pulsar_bruce import reasons

#: What one message adds to a batch besides its key field and value, at most:
#: entry size (4), payload_size tag + varint (1 + 5), event_time tag + varint (1 + 10).
ENTRY_OVERHEAD = 4 + 1 + 5 + 11


def memory_charge(key_field: bytes, value_size: int) -> int:
    """Bytes one message is charged against ``--buffer-max-bytes`` while it is buffered.

    An upper bound of the entry it becomes in its batch; a batch's charge is the
    sum of its messages' charges, released when the batch is acked or discarded.
    """
    return len(key_field) + value_size + ENTRY_OVERHEAD


class TopicCounters:
    """Per-topic outcome counters (bounded label sets for metrics and ``/status``)."""

    __slots__ = ("acked", "discarded")

    def __init__(self) -> None:
        self.acked = 0
        self.discarded: dict[str, int] = {}


class Ledger:
    """Daemon-wide counters; see the module docstring for the identity they keep."""

    __slots__ = (
        "acked",
        "already_stored",
        "batches_sent",
        "buffered_bytes",
        "buffered_messages",
        "discarded",
        "possible_duplicates",
        "received",
        "spooled_messages",
    )

    def __init__(self) -> None:
        self.received = 0
        self.acked = 0
        self.discarded: dict[str, int] = dict.fromkeys(reasons.ALL, 0)
        #: Messages in memory or in this run's spool: received, not yet acked or discarded.
        self.buffered_messages = 0
        #: Memory charged for the buffered messages held in memory.
        self.buffered_bytes = 0
        #: Of ``buffered_messages``, those this run wrote to the disk spool.
        self.spooled_messages = 0
        self.possible_duplicates = 0
        self.batches_sent = 0
        #: Of ``acked``, messages the broker already had under their sender's producer name
        #: and ids (a retried task's; see ``route/sequenced.py``): acked, not stored again.
        self.already_stored = 0

    # -- at the door -------------------------------------------------------------------

    def reject(self, reason: str, topic: TopicCounters | None = None) -> None:
        """A message read and refused at once (malformed, too large, rate limited, ...)."""
        self.received += 1
        self.discarded[reason] = self.discarded.get(reason, 0) + 1
        if topic is not None:
            topic.discarded[reason] = topic.discarded.get(reason, 0) + 1

    def accept(self, charge: int) -> None:
        """A message read and taken into memory."""
        self.received += 1
        self.buffered_messages += 1
        self.buffered_bytes += charge

    def accept_many(self, count: int, charge: int) -> None:
        """``count`` messages read and taken into memory, ``charge`` bytes in all (the
        compiled intake tells its acceptances once per call, not once per message)."""
        self.received += count
        self.buffered_messages += count
        self.buffered_bytes += charge

    def spill(self) -> None:
        """A message read and written to the disk spool instead of memory."""
        self.received += 1
        self.buffered_messages += 1
        self.spooled_messages += 1

    # -- the spool ---------------------------------------------------------------------

    def unspill(self, charge: int) -> None:
        """A message this run spooled is back in memory (already counted as received)."""
        self.spooled_messages -= 1
        self.buffered_bytes += charge

    def readmit(self, count: int, charge: int) -> None:
        """Messages an earlier run spooled, read back into memory: received by this run now."""
        self.received += count
        self.buffered_messages += count
        self.buffered_bytes += charge

    def to_disk(self, count: int, charge: int) -> None:
        """Buffered messages moved from memory to the spool (shutdown); still buffered."""
        self.spooled_messages += count
        self.buffered_bytes -= charge

    def discard_spilled(self, reason: str, count: int) -> None:
        """Messages counted as spooled that could not be written after all."""
        self.spooled_messages -= count
        self.buffered_messages -= count
        self.discarded[reason] = self.discarded.get(reason, 0) + count

    def lost_in_spool(self, this_run: int, previous_run: int) -> None:
        """Messages lost to damage in the spool (``spool_damaged``): ``this_run`` had been
        spilled by this run; ``previous_run`` were an earlier run's, received only now."""
        self.discard_spilled(reasons.SPOOL_DAMAGED, this_run)
        self.received += previous_run
        self.discarded[reasons.SPOOL_DAMAGED] += previous_run

    # -- outcomes ------------------------------------------------------------------------

    def ack(self, topic: TopicCounters, count: int, charge: int) -> None:
        """Buffered messages the broker confirmed."""
        self.acked += count
        self.buffered_messages -= count
        self.buffered_bytes -= charge
        topic.acked += count

    def discard(self, reason: str, count: int, charge: int, topic: TopicCounters | None) -> None:
        """Buffered messages given up."""
        self.buffered_messages -= count
        self.buffered_bytes -= charge
        self.discarded[reason] = self.discarded.get(reason, 0) + count
        if topic is not None:
            topic.discarded[reason] = topic.discarded.get(reason, 0) + count

    def sent(self, batches: int, resent_messages: int) -> None:
        """Batches written to brokers; ``resent_messages`` had been written before."""
        self.batches_sent += batches
        self.possible_duplicates += resent_messages

    def stored_before(self, topic: TopicCounters, count: int, charge: int) -> None:
        """Sender-numbered messages the broker already had: acked, and counted as such."""
        self.ack(topic, count, charge)
        self.already_stored += count

    def possible_duplicate(self, count: int) -> None:
        """Messages that may already be stored by the broker (e.g. replayed after a crash)."""
        self.possible_duplicates += count

    # -- reading -----------------------------------------------------------------------------

    @property
    def discarded_total(self) -> int:
        return sum(self.discarded.values())

    def identity_holds(self) -> bool:
        return self.received == self.acked + self.discarded_total + self.buffered_messages
