"""The spool's asyncio edge: durability ticks, replay, and the shutdown hand-over.

Every tick it writes what :class:`SpoolPolicy` holds, tells it whether a broker
is reachable, and replays as much as the policy allows, oldest first, through
a :class:`Replayer` (the intake).  At shutdown, what memory still holds goes to a
front segment, replayed first on the next start.  Records spooled by an earlier
run are counted as received when they are replayed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from pulsar_bruce.spool import records
from pulsar_bruce.spool.policy import SpoolPolicy
from pulsar_bruce.spool.records import SpooledBatch
from pulsar_bruce.spool.store import SpoolStore

log = logging.getLogger(__name__)

_TICK_S = 0.05
_SYNC_EVERY_S = 1.0
_REPLAY_CHUNK_BYTES = 4 * 1024 * 1024


class Replayer(Protocol):
    """Takes spooled records back (implemented by the intake)."""

    def replay_datagram(self, data: bytes, *, previous_run: bool) -> None: ...

    def replay_batch(self, spooled: SpooledBatch) -> None: ...


class Spooler:
    """Connects a :class:`SpoolStore` and its :class:`SpoolPolicy` to the event loop."""

    def __init__(
        self,
        store: SpoolStore,
        policy: SpoolPolicy,
        replayer: Replayer,
        *,
        broker_reachable: Callable[[], bool],
        after_replay: Callable[[], None],
    ):
        self.store = store
        self.policy = policy
        self.replayer = replayer
        self._broker_reachable = broker_reachable
        self._after_replay = after_replay
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
        """Durability, broker watch and replay until cancelled."""
        last_sync = time.monotonic()
        while True:
            await asyncio.sleep(_TICK_S)
            now = time.monotonic()
            self.tick(now)
            if self.store.fsync == "interval" and now - last_sync >= _SYNC_EVERY_S:
                self.store.sync()
                last_sync = now

    def tick(self, now: float) -> None:
        policy = self.policy
        policy.write_held()
        policy.watch_brokers(now, self._broker_reachable())
        if self._stopping:
            return
        room = policy.replay_room()
        if room <= 0:
            return
        for kind, body, segment in self.store.read(min(room, _REPLAY_CHUNK_BYTES)):
            if kind == records.DATAGRAM:
                previous_run = segment in self._previous_run_segments
                self.replayer.replay_datagram(body, previous_run=previous_run)
            else:
                self.replayer.replay_batch(records.decode_batch(body, kind))
        self._after_replay()

    def stop_replaying(self) -> None:
        self._stopping = True

    def shutdown(self, front: list[bytes]) -> bool:
        """Write ``front`` (what memory still holds) before everything else on disk, and
        close the store; False when it did not fit or could not be written."""
        self._stopping = True
        self.policy.write_held()
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
