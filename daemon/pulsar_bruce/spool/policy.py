"""Memory or disk: the one place that decides where a new message is kept, sans-IO.

Memory while it is below ``--buffer-max-bytes`` and nothing waits on disk.
Otherwise, with a spool, the disk: the datagram is held here and written with
everything else held during the same socket drain (one write, one fsync under
``always``), never on the per-message path.  Once something is on disk, new
messages queue behind it there, so order is kept, until the spool is drained.
Without a spool (or with a full one) the message cannot be taken.  When the
disk refuses a write (a full filesystem, an I/O error), what memory still has
room for is taken into memory instead (``write_held``'s ``into_memory``), the
rest is discarded as ``buffer_full``; the next drain tries the disk again, so
the spool takes messages again as soon as the disk has room.

The asyncio edge (:class:`~pulsar_bruce.spool.spooler.Spooler`) feeds the
clock and broker reachability in, and asks how much it may replay.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from pulsar_bruce import reasons
from pulsar_bruce.model.admission import ACCEPT, REPLAY, admission
from pulsar_bruce.model.ledger import Ledger
from pulsar_bruce.spool import records
from pulsar_bruce.spool.store import SpoolStore

log = logging.getLogger(__name__)


class Refusals(Protocol):
    """Evidence of a message refused (``route/outcomes.py``'s ``Outcomes``)."""

    def refused(self, reason: str, data: bytes, *, sample: bool, size: int | None = None) -> None:
        ...


class SpoolPolicy:
    """Decides memory vs disk for every message, and when spooled ones come back."""

    def __init__(
        self,
        ledger: Ledger,
        buffer_max_bytes: int,
        store: SpoolStore | None = None,
        unreachable_after_s: float = 10.0,
        refusals: Refusals | None = None,
    ):
        self.ledger = ledger
        self.buffer_max_bytes = buffer_max_bytes
        self.store = store
        self.unreachable_after_s = unreachable_after_s
        #: Told of each datagram discarded here (``Outcomes``: the discard log).
        self.refusals = refusals
        #: What memory may hold now (``buffered_bytes`` plus a new message's charge at most):
        #: the cap, or -1 while spilling, when new messages queue behind the spool, on disk.
        self.memory_limit = buffer_max_bytes
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._unreachable_since: float | None = None

    @property
    def spilling(self) -> bool:
        """True while the spool holds messages: new ones queue behind them, on disk."""
        return self.memory_limit < 0

    @spilling.setter
    def spilling(self, on: bool) -> None:
        self.memory_limit = -1 if on else self.buffer_max_bytes

    # -- per message -----------------------------------------------------------------

    def room(self) -> int:
        """The bytes memory can take now: the admission decision's ``room``
        (``model/admission.py``); negative while spilling.  The intake computes it inline
        on its per-message path."""
        return self.memory_limit - self.ledger.buffered_bytes

    def hold(self, datagram: bytes) -> bool:
        """Keep ``datagram`` for the disk (written by :meth:`write_held`); False: no room."""
        store = self.store
        if store is None:
            return False
        record = records.encode(records.DATAGRAM, datagram)
        if not store.has_room(self._held_bytes + len(record)):
            return False
        self._held.append(record)
        self._held_bytes += len(record)
        self.spilling = True  # from now on, in order: everything after it goes there too
        return True

    # -- per drain or tick -------------------------------------------------------------

    def write_held(self, into_memory: Callable[[bytes], None] | None = None) -> None:
        """Write the datagrams held since the last call, in one write.

        If the disk refuses them (the store leaves none of them on disk), those
        memory has room for go to memory (``into_memory``: the intake's replay), oldest
        first, and
        the rest are discarded as ``buffer_full`` (the spool is as good as full),
        each told to :attr:`refusals` (the discard log); logged once per failed write.
        """
        if not self._held:
            return
        held, self._held, self._held_bytes = self._held, [], 0
        assert self.store is not None
        try:
            self.store.append(b"".join(held), len(held))
        except OSError as exc:  # disk full, I/O error: memory, else as if the spool were full
            kept = self._into_memory(held, into_memory)
            log.error(
                "spool %s: cannot write (%s); %d messages kept in memory, %d discarded as "
                "buffer_full",
                self.store.directory,
                exc,
                kept,
                len(held) - kept,
            )
            if kept == len(held):
                return
            self.ledger.discard_spilled(reasons.BUFFER_FULL, len(held) - kept)
            if self.refusals is not None:
                for record in held[kept:]:
                    datagram = record[records.HEADER_SIZE + 1 :]
                    self.refusals.refused(reasons.BUFFER_FULL, datagram, sample=False)

    def _into_memory(self, held: list[bytes], into_memory: Callable[[bytes], None] | None) -> int:
        """Give the first of ``held`` (records) to memory while it has room; how many."""
        if into_memory is None:
            return 0
        ledger, capacity = self.ledger, self.buffer_max_bytes
        kept = 0
        for record in held:
            datagram = record[records.HEADER_SIZE + 1 :]
            size, room = len(datagram), capacity - ledger.buffered_bytes
            if admission(None, size, size, room, capacity, REPLAY) != ACCEPT:
                break
            into_memory(datagram)
            kept += 1
        return kept

    def watch_brokers(self, now: float, reachable: bool) -> None:
        """No broker reachable for ``unreachable_after_s`` while messages wait: spill.

        An outage starts when messages wait in memory and no broker is reachable,
        and lasts until one is reachable again (memory emptying by send timeouts
        does not end it), so the spool is not replayed into a dead end.
        """
        if self.store is None or reachable:
            self._unreachable_since = None
            return
        if self._unreachable_since is None:
            ledger = self.ledger
            if ledger.buffered_messages > ledger.spooled_messages:
                self._unreachable_since = now
        elif now - self._unreachable_since >= self.unreachable_after_s and not self.spilling:
            log.warning(
                "no broker reachable for %.0f s: new messages go to the spool %s",
                now - self._unreachable_since,
                self.store.directory,
            )
            self.spilling = True

    def replay_room(self) -> int:
        """Bytes of spooled records that may come back into memory now (0: none).

        Replay waits for a reachable broker and for memory below half its cap;
        when the spool is empty, messages flow through memory again.
        """
        if not self.spilling or self._unreachable_since is not None or self.store is None:
            return 0
        if self.store.is_empty and not self._held:
            self.spilling = False
            log.info("spool drained; messages flow through memory again")
            return 0
        return max(self.buffer_max_bytes // 2 - self.ledger.buffered_bytes, 0)
