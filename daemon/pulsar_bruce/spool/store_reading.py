"""The reading half of the spool store: records back from the head, in order, and the
damage found on the way (counted, logged once per segment).  See ``store.py``.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from pathlib import Path

from pulsar_bruce.spool import layout, records

#: The store's logger: these lines read as the store's.
log = logging.getLogger("pulsar_bruce.spool.store")


class StoreReading:
    """The reading rules of :class:`~.store.SpoolStore` (its base), which owns the state
    below and sets it up; the tail it writes is read like any other segment."""

    directory: Path
    size_bytes: int
    corrupt_records: int
    lost_this_run: int
    lost_previous_run: int
    suspect: set[str]
    _tail: io.FileIO | None
    _tail_name: str
    _offsets: dict[str, int]
    _unread: dict[str, int]
    _finished: list[str]
    _limits: dict[str, int]
    _damage: dict[str, list[int]]
    _tallies: dict[str, records.Tally]

    def _segments(self) -> list[str]:
        raise NotImplementedError

    def _close_tail(self) -> None:
        raise NotImplementedError

    def read(self, max_bytes: int) -> list[tuple[int, bytes, str]]:
        """Up to about ``max_bytes`` of records from the head, in order, as (kind, body,
        segment name); at least one whole record, however large, if any can be read now
        (marks and damage are read past).  Deletes nothing (see :meth:`commit`).  An
        OSError is raised only when nothing could be read: else what was read comes back,
        and the segment that failed is tried again next time."""
        out: list[tuple[int, bytes, str]] = []
        budget = max_bytes
        segments = [name for name in self._segments() if name not in self._finished]
        self._count_vanished(segments)
        for name in segments:
            is_tail = name == self._tail_name
            while budget > 0 or not out:
                try:
                    data, at_end, offset = self._read_chunk(name, budget)
                except OSError:
                    if out:
                        return out
                    raise
                result = records.scan(data, final=at_end and not is_tail, tally=self._tally(name))
                out.extend((kind, body, name) for kind, body in result.records)
                self._account(name, result)
                self.size_bytes = max(self.size_bytes - result.consumed, 0)
                budget -= result.consumed
                if at_end and result.consumed == len(data):
                    self._finish(name)
                    break
                self._offsets[name] = offset + result.consumed
                if out or not result.consumed:
                    return out  # this segment is not done: the next one must wait
            else:
                return out
            if is_tail:
                break
        return out

    def _tally(self, name: str) -> records.Tally:
        tally = self._tallies.get(name)
        if tally is None:  # read from its start: its marks count from 0
            tally = records.Tally(mark=0 if self._offsets.get(name, 0) == 0 else None)
            self._tallies[name] = tally
        return tally

    def _account(self, name: str, result: records.ScanResult) -> None:
        """What a chunk of ``name`` gave back, and the damage it found."""
        if name in self._unread:  # this run's: datagrams only, counted at the end
            self._unread[name] = max(self._unread[name] - len(result.records), 0)
        else:
            self.lost_previous_run += result.lost_messages
        if result.corrupt or result.lost_messages:
            damage = self._damage.setdefault(name, [0, 0])
            damage[0] += result.corrupt
            damage[1] += result.lost_messages
        self.corrupt_records += result.corrupt

    def _read_chunk(self, name: str, budget: int) -> tuple[bytes, bool, int]:
        """The next bytes of ``name`` (a whole record at least), whether they reach its end
        (or the end of what may be read of it), and the offset they start at."""
        offset = self._offsets.get(name, 0)
        with (self.directory / name).open("rb") as handle:
            end = os.fstat(handle.fileno()).st_size
            end = min(end, self._limits.get(name, end))
            if offset > end:  # cut short while we read it
                if name in self._unread:  # what is left of it is counted as lost at its end
                    return b"", True, end
                log.error("spool %s: segment %s is shorter (%d bytes) than its read offset "
                          "%d: replaying it from its start (possible duplicates)",
                          self.directory, name, end, offset)  # fmt: skip
                self.suspect.add(name)
                offset = 0
            handle.seek(offset)
            data = handle.read(min(max(budget, records.HEADER_SIZE), end - offset))
            whole = records.first_record_size(data)
            if whole > len(data):  # the budget is smaller than the next record
                data += handle.read(min(whole, end - offset) - len(data))
        return data, offset + len(data) >= end, offset

    def _finish(self, name: str) -> None:
        """``name`` is read to its end: count and log what it lost, delete it at commit."""
        self._finished.append(name)
        self._offsets.pop(name, None)
        self._limits.pop(name, None)
        self._tallies.pop(name, None)
        corrupt, lost = self._damage.pop(name, (0, 0))
        this_run = name in self._unread
        if this_run:
            lost = self._unread.pop(name)  # exact: whatever did not come back
            self.lost_this_run += lost
        if corrupt or lost:
            log.error("spool %s: segment %s damaged: %d corrupt records, %d messages lost "
                      "(counted as spool_damaged)%s", self.directory, name, corrupt, lost,
                      "" if this_run or lost else "; how many it held is unknown")  # fmt: skip
        if name == self._tail_name:
            # Everything written has been read: the next append starts a fresh segment.
            if self._tail is not None:
                self._tail.close()
                self._tail = None
            self._tail_name = ""
            self._offsets.clear()  # the tail is the last segment: all before it are read
            self.size_bytes = 0

    def _count_vanished(self, segments: list[str]) -> None:
        """This run's segments that are gone (deleted, renamed, replaced): their unread
        messages are lost, counted; the tail is given up, so new records land on disk."""
        for name in [n for n in self._unread if n not in segments]:
            lost = self._unread.pop(name)
            self.lost_this_run += lost
            self._offsets.pop(name, None)
            self._tallies.pop(name, None)
            log.error("spool %s: segment %s is gone; %d messages lost (counted as "
                      "spool_damaged)", self.directory, name, lost)  # fmt: skip
            if name == self._tail_name:
                with contextlib.suppress(OSError):
                    self._close_tail()
                self._tail, self._tail_name = None, ""
            self.size_bytes = sum(
                layout.size(self.directory / n) - self._offsets.get(n, 0) for n in segments
            )
