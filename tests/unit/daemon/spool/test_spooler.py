"""Spooler with a real SpoolStore and SpoolPolicy and a recording replayer: ticks write what
is held and replay oldest first (this run's and earlier runs' records), only while no
outage is in force and memory is below half its cap; the shutdown hand-over."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path

import pytest
from pulsar_bruce.model.ledger import Ledger, TopicCounters
from pulsar_bruce.spool import records
from pulsar_bruce.spool import store as store_module
from pulsar_bruce.spool.policy import SpoolPolicy
from pulsar_bruce.spool.records import SpooledBatch
from pulsar_bruce.spool.spooler import Spooler
from pulsar_bruce.spool.store import SpoolStore

from tests.support.fakes_asyncio import until

CAP = 1 << 20
SPOOL_MAX = 1 << 20
NOW = 1000.0


class RecordingReplayer:
    """The intake's replay side, recording what comes back (and in which order)."""

    def __init__(self, ledger: Ledger | None = None) -> None:
        self.replayed: list[tuple[bytes, bool] | SpooledBatch] = []
        #: When given, replayed datagrams of earlier runs are taken into memory, as the intake does.
        self.ledger = ledger

    def replay_datagram(self, data: bytes, *, previous_run: bool) -> None:
        self.replayed.append((data, previous_run))
        if self.ledger is not None:
            if previous_run:
                self.ledger.readmit(1, len(data))
            else:
                self.ledger.unspill(len(data))

    def replay_batch(self, spooled: SpooledBatch) -> None:
        self.replayed.append(spooled)


class Rig:
    """A spooler as the server builds it, over a store in ``directory``."""

    def __init__(
        self,
        directory: Path,
        *,
        fsync: str = "never",
        max_bytes: int = SPOOL_MAX,
        cap: int = CAP,
        into_memory: bool = False,
    ):
        self.ledger = Ledger()
        self.store = SpoolStore(directory, max_bytes, fsync=fsync)
        self.policy = SpoolPolicy(self.ledger, cap, self.store, unreachable_after_s=10.0)
        self.replayer = RecordingReplayer(self.ledger if into_memory else None)
        self.reachable = True
        self.replays = 0
        self.spooler = Spooler(
            self.store,
            self.policy,
            self.replayer,
            brokers=self,
            writer=self,
        )
        self.spooler.open()

    @property
    def connections(self) -> list[object]:
        """The broker connections the spooler sees: one while ``reachable``."""
        return [object()] if self.reachable else []

    def flush_dirty(self) -> None:
        """The topic manager's part after a replay: counted."""
        self.replays += 1

    def spill(self, *datagrams: bytes) -> None:
        """What the intake does with datagrams memory cannot take."""
        for datagram in datagrams:
            assert self.policy.hold(datagram)
            self.ledger.spill()

    @property
    def datagrams(self) -> list[tuple[bytes, bool]]:
        return [item for item in self.replayer.replayed if isinstance(item, tuple)]


def earlier_run(directory: Path, *datagrams: bytes, front: list[bytes] | None = None) -> None:
    """A run that spooled ``datagrams`` (and, at shutdown, ``front``) and stopped."""
    rig = Rig(directory)
    rig.spill(*datagrams)
    rig.spooler.stop_replaying()
    rig.spooler.tick(NOW)
    assert rig.spooler.shutdown(front or []) == bool(front)


def test_a_tick_writes_what_is_held_and_replays_it_as_this_runs(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.spill(b"d1", b"d2")
    assert rig.store.is_empty  # held in memory until the tick
    rig.spooler.tick(NOW)
    assert rig.datagrams == [(b"d1", False), (b"d2", False)]
    assert rig.replays == 1
    assert rig.store.is_empty
    rig.spooler.tick(NOW)  # the spool is drained: messages flow through memory again
    assert not rig.policy.spilling
    assert rig.replays == 1


def test_records_of_an_earlier_run_come_back_first_and_flagged(tmp_path: Path) -> None:
    earlier_run(tmp_path, b"old1", b"old2")
    rig = Rig(tmp_path)
    assert rig.policy.spilling  # new messages queue behind the old ones
    rig.spill(b"new1")
    rig.spooler.tick(NOW)
    assert rig.datagrams == [(b"old1", True), (b"old2", True), (b"new1", False)]


def test_the_front_written_at_shutdown_is_replayed_before_everything_else(
    tmp_path: Path,
) -> None:
    batch = records.encode_batch("persistent://public/default/t", 2, 17, 3, b"entries")
    front = [batch, records.encode(records.DATAGRAM, b"waiting")]
    earlier_run(tmp_path, b"spooled", front=front)
    rig = Rig(tmp_path)
    rig.spooler.tick(NOW)
    assert rig.replayer.replayed == [
        SpooledBatch("persistent://public/default/t", 2, 17, 3, b"entries"),
        (b"waiting", True),
        (b"spooled", True),
    ]


def test_nothing_is_replayed_while_memory_is_at_half_its_cap(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    topic = TopicCounters()
    rig.ledger.accept(CAP // 2)  # a message in memory, charged half the cap
    rig.spill(b"d1", b"d2")
    rig.spooler.tick(NOW)
    assert rig.replayer.replayed == []
    assert not rig.store.is_empty  # written all the same
    assert rig.replays == 0
    record_size = len(records.encode(records.DATAGRAM, b"d1"))
    rig.ledger.ack(topic, 1, CAP // 2)
    rig.ledger.accept(CAP // 2 - record_size)  # room for one record's bytes
    rig.spooler.tick(NOW)
    assert rig.datagrams == [(b"d1", False)]
    rig.ledger.ack(topic, 1, CAP // 2 - record_size)
    rig.spooler.tick(NOW)
    assert rig.datagrams == [(b"d1", False), (b"d2", False)]


def test_replay_waits_out_an_outage_and_resumes_when_a_broker_is_reachable(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path)
    rig.ledger.accept(100)  # a message waits in memory
    rig.reachable = False
    rig.spooler.tick(NOW)  # the outage starts
    rig.spooler.tick(NOW + 10.0)  # ... and lasts: new messages go to disk
    assert rig.policy.spilling
    rig.spill(b"d1")
    rig.ledger.discard("send_timeout", 1, 100, None)  # memory empties; the outage goes on
    rig.spooler.tick(NOW + 20.0)
    assert rig.replayer.replayed == []
    rig.reachable = True
    rig.spooler.tick(NOW + 21.0)
    assert rig.datagrams == [(b"d1", False)]


def test_at_start_one_chunk_comes_back_before_any_broker_is_reachable(tmp_path: Path) -> None:
    """Replay is what opens the topics (and so the connections): with nothing in memory
    there is no outage yet.  Once the replayed messages wait in memory with no broker
    reachable, the outage holds the rest on disk."""
    earlier_run(tmp_path, b"old1", b"old2", b"old3")
    record_size = len(records.encode(records.DATAGRAM, b"old1"))
    rig = Rig(tmp_path, cap=2 * record_size, into_memory=True)  # room for one record
    rig.reachable = False
    rig.spooler.tick(NOW)
    assert rig.datagrams == [(b"old1", True)]
    rig.spooler.tick(NOW + 1.0)
    rig.spooler.tick(NOW + 60.0)
    assert rig.datagrams == [(b"old1", True)]
    rig.ledger.ack(TopicCounters(), 1, len(b"old1"))
    rig.reachable = True
    rig.spooler.tick(NOW + 61.0)
    assert rig.datagrams == [(b"old1", True), (b"old2", True)]


def test_stop_replaying_keeps_writing_but_replays_nothing(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.spill(b"d1")
    rig.spooler.stop_replaying()
    rig.spooler.tick(NOW)
    assert rig.replayer.replayed == []
    assert not rig.store.is_empty


def test_run_ticks_on_its_own_until_cancelled(tmp_path: Path) -> None:
    async def test() -> None:
        rig = Rig(tmp_path)
        task = asyncio.get_running_loop().create_task(rig.spooler.run())
        rig.spill(b"d1")
        await until(lambda: rig.datagrams, "a tick")
        assert rig.datagrams == [(b"d1", False)]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(test())


# -- shutdown --------------------------------------------------------------------------------


def test_shutdown_writes_what_is_held_then_the_front_ahead_of_it(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.spill(b"held")
    front = [records.encode(records.DATAGRAM, b"in-memory")]
    assert rig.spooler.shutdown(front)
    rig.spooler.tick(NOW)  # stopping: nothing is replayed any more
    assert rig.replayer.replayed == []
    again = Rig(tmp_path)
    again.spooler.tick(NOW)
    assert again.datagrams == [(b"in-memory", True), (b"held", True)]


def test_shutdown_without_room_for_the_front_says_so(tmp_path: Path) -> None:
    front = [records.encode(records.DATAGRAM, b"x" * 100)]
    rig = Rig(tmp_path, max_bytes=len(front[0]) - 1)
    assert not rig.spooler.shutdown(front)
    assert Rig(tmp_path).store.is_empty


def test_a_failed_front_write_returns_false_and_the_store_is_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = Rig(tmp_path)
    rig.spill(b"held")

    def full_disk(front: list[bytes]) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(rig.store, "write_front", full_disk)
    assert not rig.spooler.shutdown([records.encode(records.DATAGRAM, b"in-memory")])
    again = Rig(tmp_path)
    again.spooler.tick(NOW)
    assert again.datagrams == [(b"held", True)]  # what was held is on disk all the same


def test_a_front_write_that_fails_midway_leaves_nothing_to_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spooler.shutdown returns False and the server counts the front as discarded
    (shutdown): the half-written front file must not be replayed by the next start."""
    rig = Rig(tmp_path, fsync="interval")
    real_fsync = os.fsync

    def fsync_failing_on_the_front(fd: int) -> None:
        if Path(os.readlink(f"/proc/self/fd/{fd}")).name.endswith(".0front.spool"):
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(store_module.os, "fsync", fsync_failing_on_the_front)
    front = [records.encode(records.DATAGRAM, b"in-memory")]
    assert not rig.spooler.shutdown(front)
    monkeypatch.undo()
    again = Rig(tmp_path)
    again.spooler.tick(NOW)
    assert again.replayer.replayed == []  # discarded in the last run: not delivered now


# -- faults and damage (issue "Nothing the daemon has read is lost") ---------------------------


def write_segment(directory: Path, number: int, *bodies: bytes) -> Path:
    path = directory / f"seg-{number:012d}.spool"
    path.write_bytes(b"".join(records.encode(records.DATAGRAM, body) for body in bodies))
    return path


def test_run_survives_io_errors_and_replays_once_the_disk_is_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def test() -> None:
        rig = Rig(tmp_path)
        real_read, failures = rig.store.read, [0]

        def failing_read(max_bytes: int) -> list[tuple[int, bytes, str]]:
            if failures[0] < 3:
                failures[0] += 1
                raise OSError(errno.EIO, "Input/output error")
            return real_read(max_bytes)

        monkeypatch.setattr(rig.store, "read", failing_read)
        task = asyncio.get_running_loop().create_task(rig.spooler.run())
        rig.spill(b"d1")
        await until(lambda: rig.datagrams or task.done(), "a replay after the errors")
        assert not task.done()  # the old run() died on the first OSError
        assert rig.datagrams == [(b"d1", False)] and failures[0] == 3
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(test())


def test_a_directory_named_like_a_segment_is_left_alone_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    earlier_run(tmp_path, b"old1", b"old2")
    (tmp_path / "seg-000000000000.spool").mkdir()  # sorts before the real head
    (tmp_path / "notes.txt").write_text("not ours")
    rig = Rig(tmp_path)
    rig.spooler.tick(NOW)
    rig.spooler.tick(NOW)
    assert rig.datagrams == [(b"old1", True), (b"old2", True)]
    assert (tmp_path / "seg-000000000000.spool").is_dir() and (tmp_path / "notes.txt").exists()
    assert caplog.text.count("seg-000000000000.spool is not a spool segment") == 1
    assert caplog.text.count("notes.txt is not a spool segment") == 1


def test_nothing_read_is_deleted_before_it_is_returned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first segment is read to its end, the second cannot be opened: what the first
    held comes back (and only then is it deleted); the second waits for the next tick."""
    first = write_segment(tmp_path, 1, b"a1", b"a2")
    write_segment(tmp_path, 2, b"b1")
    real_open = Path.open

    def failing_open(self: Path, mode: str = "r", *args: object, **kwargs: object) -> object:
        if self.name == "seg-000000000002.spool":
            raise OSError(errno.EIO, "Input/output error")
        return real_open(self, mode, *args, **kwargs)  # type: ignore[call-overload]

    rig = Rig(tmp_path)
    with monkeypatch.context() as patched:  # undone before pytest reads a source file
        patched.setattr(Path, "open", failing_open)
        rig.spooler.tick(NOW)
    assert rig.datagrams == [(b"a1", True), (b"a2", True)]
    assert not first.exists()  # deleted once its records were admitted
    rig.spooler.tick(NOW)
    assert rig.datagrams == [(b"a1", True), (b"a2", True), (b"b1", True)]


def blocked_rig(directory: Path) -> Rig:
    """A rig whose memory is full: ticks write to disk but replay nothing."""
    rig = Rig(directory)
    rig.ledger.accept(CAP // 2)
    return rig


def unblock(rig: Rig) -> None:
    rig.ledger.ack(TopicCounters(), 1, CAP // 2)


def full_rig(directory: Path, fsync: str = "never") -> Rig:
    """A rig whose memory is full to its cap: what the disk refuses cannot go there."""
    rig = Rig(directory, fsync=fsync, into_memory=True)
    rig.ledger.accept(CAP)
    return rig


def empty_memory(rig: Rig) -> None:
    rig.ledger.ack(TopicCounters(), 1, CAP)


@pytest.mark.parametrize("damage", ["truncate", "rename"])
def test_a_segment_of_this_run_cut_to_nothing_or_renamed_is_counted(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    rig = blocked_rig(tmp_path)
    rig.spill(b"d1", b"d2")
    rig.spooler.tick(NOW)
    (segment,) = rig.store.segment_names()
    if damage == "truncate":
        os.truncate(tmp_path / segment, 0)
    else:
        (tmp_path / segment).rename(tmp_path / (segment + ".bak"))
    unblock(rig)
    rig.spooler.tick(NOW)
    assert rig.ledger.discarded["spool_damaged"] == 2
    assert rig.ledger.spooled_messages == 0 and rig.ledger.identity_holds()
    assert "2 messages lost (counted as spool_damaged)" in caplog.text
    rig.spill(b"d3")  # the spool takes new messages, and they come back
    rig.spooler.tick(NOW)
    assert rig.datagrams == [(b"d3", False)]


def test_a_cursor_past_the_end_replays_the_segment_from_its_start_as_possible_duplicates(
    tmp_path: Path,
) -> None:
    write_segment(tmp_path, 1, b"old1", b"old2")
    (tmp_path / "cursor").write_text("seg-000000000001.spool 9999")
    rig = Rig(tmp_path, into_memory=True)
    rig.spooler.tick(NOW)
    assert rig.datagrams == [(b"old1", True), (b"old2", True)]  # not skipped whole
    assert rig.ledger.possible_duplicates == 2


def test_a_corrupt_batch_record_counts_its_messages_and_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    batch = bytearray(records.encode_batch("persistent://public/default/t", 0, 5, 572, b"e" * 6000))
    batch[-100] ^= 0xFF  # a flipped bit in the entries: the header still says 572
    good = records.encode(records.DATAGRAM, b"intact")
    (tmp_path / "seg-000000000001.spool").write_bytes(bytes(batch) + good)
    rig = Rig(tmp_path, into_memory=True)
    rig.spooler.tick(NOW)
    assert rig.datagrams == [(b"intact", True)]
    assert rig.store.corrupt_records == 1
    assert rig.ledger.discarded["spool_damaged"] == 572 and rig.ledger.identity_holds()
    assert caplog.text.count("damaged: 1 corrupt records, 572 messages lost") == 1


def test_a_write_whose_fsync_fails_leaves_nothing_on_disk_to_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Discarded as buffer_full, so never replayed: the ledger and the disk agree."""
    rig = full_rig(tmp_path, fsync="always")
    rig.spill(b"d1")

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(store_module.os, "fsync", failing_fsync)
    rig.spooler.tick(NOW)
    monkeypatch.undo()
    assert rig.ledger.discarded["buffer_full"] == 1
    rig.spill(b"d2")
    empty_memory(rig)
    rig.spooler.tick(NOW)
    assert rig.datagrams == [(b"d2", False)] and rig.ledger.identity_holds()


def test_a_write_cut_short_by_a_full_disk_is_undone_and_goes_to_the_discard_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refused: list[tuple[str, bytes]] = []
    rig = full_rig(tmp_path)
    rig.policy.refusals = Refused(refused)
    rig.spill(b"d1", b"d2", b"d3")
    real_write, writes = os.write, [0]

    def half_then_full(fd: int, data: bytes | memoryview) -> int:
        if not os.readlink(f"/proc/self/fd/{fd}").startswith(str(tmp_path)):
            return real_write(fd, data)  # not the spool's: pytest's own output
        writes[0] += 1
        if writes[0] == 1:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_module.os, "write", half_then_full)
    rig.spooler.tick(NOW)
    monkeypatch.undo()
    assert refused == [("buffer_full", b"d1"), ("buffer_full", b"d2"), ("buffer_full", b"d3")]
    assert rig.ledger.discarded["buffer_full"] == 3 and rig.store.is_empty
    rig.spill(b"d4")
    empty_memory(rig)
    rig.spooler.tick(NOW)
    assert rig.datagrams == [(b"d4", False)] and rig.store.corrupt_records == 0
    assert rig.ledger.identity_holds()


# -- a full disk, then room again (issue 29) ----------------------------------------------------


class FullDisk:
    """The store's writes fail with ENOSPC (the spool's files, not pytest's) while ``full``."""

    def __init__(self, directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full = True
        real_write = os.write

        def write(fd: int, data: bytes | memoryview) -> int:
            if self.full and os.readlink(f"/proc/self/fd/{fd}").startswith(str(directory)):
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_write(fd, data)

        monkeypatch.setattr(store_module.os, "write", write)


def test_what_a_full_disk_refuses_goes_to_memory_while_it_has_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No broker for a while: new messages go to the spool, whose disk is full. Memory has
    room, so they wait there instead of being discarded; once the disk has room again,
    the spool takes the next ones (and gives them back when a broker is reachable)."""
    rig = Rig(tmp_path, into_memory=True)
    rig.ledger.accept(100)  # waiting for a broker
    rig.reachable = False
    rig.spooler.tick(NOW)
    rig.spooler.tick(NOW + 11)  # unreachable for longer than unreachable_after_s: spilling
    assert rig.policy.spilling
    disk = FullDisk(tmp_path, monkeypatch)
    rig.spill(b"d1", b"d2")
    rig.spooler.tick(NOW + 12)
    assert rig.datagrams == [(b"d1", False), (b"d2", False)]  # in memory, in order
    assert rig.ledger.discarded.get("buffer_full", 0) == 0
    assert rig.ledger.spooled_messages == 0 and rig.ledger.identity_holds()
    disk.full = False  # space freed: the very next write lands on disk
    rig.spill(b"d3")
    rig.spooler.tick(NOW + 13)
    assert rig.ledger.spooled_messages == 1 and not rig.store.is_empty
    rig.reachable = True
    rig.spooler.tick(NOW + 14)
    assert rig.datagrams[-1] == (b"d3", False)
    assert rig.ledger.spooled_messages == 0 and rig.ledger.identity_holds()
    assert rig.ledger.received == 4 and rig.ledger.buffered_messages == 4  # none twice


def test_memory_takes_what_a_full_disk_refuses_up_to_its_cap_the_rest_is_buffer_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refused: list[tuple[str, bytes]] = []
    rig = Rig(tmp_path, into_memory=True)
    rig.policy.refusals = Refused(refused)
    rig.ledger.accept(CAP - 150)  # room for one 100-byte datagram
    FullDisk(tmp_path, monkeypatch)
    rig.spill(b"1" * 100, b"2" * 100, b"3" * 100)
    rig.spooler.tick(NOW)
    assert rig.datagrams == [(b"1" * 100, False)]  # the oldest
    assert refused == [("buffer_full", b"2" * 100), ("buffer_full", b"3" * 100)]
    assert rig.ledger.discarded["buffer_full"] == 2 and rig.ledger.identity_holds()


def test_the_replay_goes_on_at_full_speed_while_the_cursor_cannot_be_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A full disk fails the cursor's save: the tick must not fail (run() would back off
    to one tick every 5 s for as long as the disk stays full); the cursor is saved by a
    later commit, once the disk has room."""
    write_segment(tmp_path, 1, b"a1", b"a2", b"a3")
    rig = Rig(tmp_path)
    real_replace, full = Path.replace, [True]

    def replace(self: Path, target: str | Path) -> Path:
        if full[0] and self.name == "cursor.tmp":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_replace(self, target)

    monkeypatch.setattr(Path, "replace", replace)
    read = rig.store.read
    monkeypatch.setattr(rig.store, "read", lambda max_bytes: read(12))  # one record a tick
    rig.spooler.tick(NOW)  # raised OSError before
    rig.spooler.tick(NOW)
    assert rig.datagrams == [(b"a1", True), (b"a2", True)]
    assert "cannot save the cursor" in caplog.text
    assert not (tmp_path / "cursor").exists()
    full[0] = False
    rig.spooler.tick(NOW)
    assert (tmp_path / "cursor").exists() or not rig.store.segment_names()
    assert rig.datagrams == [(b"a1", True), (b"a2", True), (b"a3", True)]


class Refused:
    """The policy's refusals, written down."""

    def __init__(self, into: list[tuple[str, bytes]]):
        self.into = into

    def refused(self, reason: str, data: bytes, *, sample: bool, size: int | None = None) -> None:
        self.into.append((reason, data))
