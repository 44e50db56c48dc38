"""The spool's asyncio edge: durability ticks, replay, and the shutdown hand-over.

Every tick it writes what :class:`SpoolPolicy` holds, tells it whether a broker
is reachable, and replays as much as the policy allows, oldest first, through
a :class:`Replayer` (the intake).  At shutdown, what memory still holds goes to a
front segment, replayed first on the next start.  Records spooled by an earlier
run are counted as received when they are replayed.

An I/O error (a full disk, an unreadable segment) never ends the replay: the
tick is retried with backoff and the error logged, rate-limited, so what is on
disk still comes back once the disk or the file is usable again.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Sized
from typing import Protocol

from pulsar_bruce.spool import records
from pulsar_bruce.spool.policy import SpoolPolicy
from pulsar_bruce.spool.records import SpooledBatch
from pulsar_bruce.spool.store import SpoolStore

log = logging.getLogger(__name__)
#: Retried I/O errors (the daemon's log handler lets a few lines a minute through, see
#: ``service/logs.py``; the spool layer sits below it and does not import it).
retry_log = logging.getLogger(__name__ + ".retry")

_TICK_S = 0.05
_SYNC_EVERY_S = 1.0
_REPLAY_CHUNK_BYTES = 4 * 1024 * 1024
_RETRY_MAX_S = 5.0


class Replayer(Protocol):
    """Takes spooled records back (implemented by the intake)."""

    def replay_datagram(self, data: bytes, *, previous_run: bool) -> None: ...

    def replay_batch(self, spooled: SpooledBatch) -> None: ...


class Brokers(Protocol):
    """The broker connections (``connection/pool.py``'s ``ConnectionPool``)."""

    @property
    def connections(self) -> Sized: ...


class BatchWriter(Protocol):
    """Journals and writes the batches sealed since the last call (the topic manager)."""

    def flush_dirty(self) -> None: ...


class Spooler:
    """Connects a :class:`SpoolStore` and its :class:`SpoolPolicy` to the event loop."""

    def __init__(
        self,
        store: SpoolStore,
        policy: SpoolPolicy,
        replayer: Replayer,
        *,
        brokers: Brokers,
        writer: BatchWriter,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.store = store
        self.policy = policy
        self.replayer = replayer
        #: The broker connections: none open, no broker reachable.
        self.brokers = brokers
        #: Journals and writes what a replay admitted (the topic manager).
        self.writer = writer
        #: Now, in seconds: the ticks' time (durability, the broker watch).
        self.clock = clock
        #: Where the disk refuses a write, memory keeps what it has room for.
        self._into_memory = functools.partial(replayer.replay_datagram, previous_run=False)
        self._previous_run_segments: set[str] = set()
        self._stopping = False

    def open(self) -> None:
        self.store.open()
        self._previous_run_segments = set(self.store.segment_names())
        if not self.store.is_empty:
            log.info(
                "spool %s holds %d bytes from an earlier run; replaying them first",
                self.store.directory,
                self.store.size_bytes,
            )
            self.policy.spilling = True

    async def run(self) -> None:
        """Durability, broker watch and replay until cancelled; OSErrors are retried."""
        last_sync = self.clock()
        delay = _TICK_S
        while True:
            await asyncio.sleep(delay)
            now = self.clock()
            try:
                self.tick(now)
                if now - last_sync >= _SYNC_EVERY_S:
                    if self.store.fsync == "interval":
                        self.store.sync()
                    last_sync = now
            except OSError as exc:
                delay = min(delay * 2, _RETRY_MAX_S)
                retry_log.error(
                    "spool %s: %s; retrying in %.1f s", self.store.directory, exc, delay
                )
                continue
            delay = _TICK_S

    def tick(self, now: float) -> None:
        policy = self.policy
        policy.write_held(self._into_memory)
        policy.watch_brokers(now, bool(self.brokers.connections))
        if self._stopping:
            return
        room = policy.replay_room()
        if room <= 0:
            return
        store = self.store
        ledger = policy.ledger
        flushed = False
        try:
            for kind, body, segment in store.read(min(room, _REPLAY_CHUNK_BYTES)):
                if segment in store.suspect:  # replayed from its start: some may be resent
                    ledger.possible_duplicate(records.message_count(kind, body))
                if kind == records.DATAGRAM:
                    previous_run = segment in self._previous_run_segments
                    self.replayer.replay_datagram(body, previous_run=previous_run)
                else:
                    self.replayer.replay_batch(records.decode_batch(body, kind))
            self.writer.flush_dirty()  # journalled (and sent) ...
            flushed = True
            store.commit()  # ... admitted: only now may the segments they came from go
        finally:
            this_run, previous_run_lost = store.take_losses()
            if this_run or previous_run_lost:
                ledger.lost_in_spool(this_run, previous_run_lost)
            if not flushed:
                self.writer.flush_dirty()

    def stop_replaying(self) -> None:
        self._stopping = True

    def stop(self) -> None:
        """The shutdown's first step: no more replays, and what the policy holds goes to
        disk now, so that what the disk refuses is back in memory before the caller takes
        memory's contents as the front (:meth:`shutdown`)."""
        self._stopping = True
        self.policy.write_held(self._into_memory)

    def shutdown(self, front: list[bytes]) -> bool:
        """Write ``front`` (what memory still holds, taken after :meth:`stop`) before
        everything else on disk, and close the store; False when it did not fit or could
        not be written."""
        self.stop()
        written = False
        if front and self.store.has_room(sum(len(record) for record in front)):
            try:
                self.store.write_front(front)
                written = True
            except OSError as exc:
                log.error("spool %s: cannot write at shutdown (%s)", self.store.directory, exc)
        try:
            self.store.close()
        except OSError as exc:
            log.error("spool %s: cannot close (%s)", self.store.directory, exc)
        return written
