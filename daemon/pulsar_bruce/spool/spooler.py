"""The spool's asyncio edge: when to spill to disk, when to replay, durability ticks.

Spill (new datagrams go to disk, behind anything already there) when memory
passes ``--buffer-max-bytes`` (the forwarder decides that per datagram) or
when no broker has been reachable for ``--spool-after-s``.  Replay, oldest
first, when a broker is reachable and memory is below half its cap.  At
shutdown, what memory still holds goes to a front segment, replayed first on
the next start.  Records spooled by an earlier run are counted as received
when they are replayed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from pulsar_bruce.route.forwarder import Forwarder
from pulsar_bruce.spool import records
from pulsar_bruce.spool.store import SpoolStore

log = logging.getLogger(__name__)

_TICK_S = 0.05
_SYNC_EVERY_S = 1.0
_REPLAY_CHUNK_BYTES = 4 * 1024 * 1024


class Spooler:
    """Connects a :class:`SpoolStore` to the forwarder."""

    def __init__(
        self,
        store: SpoolStore,
        forwarder: Forwarder,
        *,
        broker_reachable: Callable[[], bool],
        after_flush: Callable[[], None],
        unreachable_after_s: float,
    ):
        self.store = store
        self.forwarder = forwarder
        self._broker_reachable = broker_reachable
        self._after_flush = after_flush
        self._unreachable_after_s = unreachable_after_s
        self._unreachable_since: float | None = None
        self._previous_run_segments: set[str] = set()
        self._stopping = False

    def open(self) -> None:
        self.store.open()
        self._previous_run_segments = set(self.store.segment_names())
        self.forwarder.spill = self._spill
        if not self.store.is_empty:
            log.info(
                "spool %s holds %d bytes from an earlier run; replaying them first",
                self.store.directory,
                self.store.size_bytes,
            )
            self.forwarder.spilling = True
        self._update_stats()

    def _spill(self, datagram: bytes) -> bool:
        record = records.encode(records.DATAGRAM, datagram)
        if not self.store.has_room(len(record)):
            return False
        try:
            self.store.append(record)
        except OSError as exc:  # disk full, I/O error: as if the spool were full
            log.error("spool %s: cannot write (%s)", self.store.directory, exc)
            return False
        self.forwarder.stats.spool_bytes = self.store.size_bytes
        return True

    async def run(self) -> None:
        """Replay and housekeeping until cancelled."""
        last_sync = time.monotonic()
        while True:
            await asyncio.sleep(_TICK_S)
            now = time.monotonic()
            self._watch_brokers(now)
            if not self._stopping:
                self._replay()
            if self.store.fsync == "interval" and now - last_sync >= _SYNC_EVERY_S:
                self.store.sync()
                last_sync = now

    def _watch_brokers(self, now: float) -> None:
        stats = self.forwarder.stats
        if self._broker_reachable() or stats.buffered_messages == stats.spooled_messages:
            self._unreachable_since = None
            return
        if self._unreachable_since is None:
            self._unreachable_since = now
        elif (
            now - self._unreachable_since >= self._unreachable_after_s
            and not self.forwarder.spilling
        ):
            log.warning(
                "no broker reachable for %.0f s: new messages go to the spool %s",
                now - self._unreachable_since,
                self.store.directory,
            )
            self.forwarder.spilling = True

    def _replay(self) -> None:
        forwarder = self.forwarder
        if not forwarder.spilling or self._unreachable_since is not None:
            return
        room = forwarder.buffer_max_bytes // 2 - forwarder.stats.buffered_bytes
        if self.store.is_empty:
            forwarder.spilling = False
            log.info("spool drained; messages flow through memory again")
            return
        if room <= 0:
            return
        for kind, body, segment in self.store.read(min(room, _REPLAY_CHUNK_BYTES)):
            previous_run = segment in self._previous_run_segments
            if kind == records.DATAGRAM:
                forwarder.replay_datagram(body, previous_run=previous_run)
            else:
                forwarder.replay_batch(records.decode_batch(body))
        self._update_stats()
        self._after_flush()

    def _update_stats(self) -> None:
        stats = self.forwarder.stats
        stats.spool_bytes = self.store.size_bytes
        stats.spool_corrupt_records = self.store.corrupt_records

    def shutdown(self) -> int:
        """Write what memory still holds to the front of the spool; returns how many messages."""
        self._stopping = True

        def write(front: list[bytes]) -> bool:
            if not self.store.has_room(sum(len(record) for record in front)):
                return False
            try:
                self.store.write_front(front)
            except OSError as exc:
                log.error("spool %s: cannot write at shutdown (%s)", self.store.directory, exc)
                return False
            return True

        spooled = self.forwarder.spool_everything(write)
        try:
            self.store.close()
        except OSError as exc:
            log.error("spool %s: cannot close (%s)", self.store.directory, exc)
        self._update_stats()
        return spooled

    def stop_replaying(self) -> None:
        self._stopping = True
