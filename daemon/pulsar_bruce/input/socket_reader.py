"""The UNIX datagram socket, drained on every wake-up (``unix_sockets`` creates it).

Two readers, one behaviour: :class:`DatagramReader` (pure Python) does one
``recv_into`` per datagram on the event loop; :class:`ThreadedDatagramReader`
(the compiled intake) reads slabs with ``recvmmsg``: on its own thread, without the
GIL, where the kernel queue is deep (``max_dgram_qlen`` >= 128), and on the event
loop where it is short (the default 10: a sender blocks after ten datagrams, so a
second core buys nothing and the thread and the loop would wake each other every few
datagrams; measured, the loop alone moved 10-20 % more for the same CPU).  Either
way each datagram is one ``bytes`` and reaches the intake in the order the socket
gave them: one call each from the Python reader, one call per slab (``admit_run``)
from the compiled one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import mmap
import os
import socket
from collections.abc import Callable
from typing import Protocol

from pulsar_bruce.input.receive_policy import (
    DEEP_QLEN,
    RECEIVE_ENV,
    kernel_queue_length,
    read_linger_us,
    receive_on_thread,
)
from pulsar_bruce.native import INTAKE_DESCRIPTION, PYTHON_BY_CHOICE, compiled

log = logging.getLogger("pulsar_bruce.input")

#: Datagrams handled per wake-up before yielding to timers and receipts.
_MAX_PER_WAKEUP = 20_000
#: Datagrams per journal sync for the Python reader (the compiled one's slab: 64).
SLAB = 64
#: ``SO_PEEK_OFF`` (Linux; missing from Python's ``socket`` before 3.12 on some builds).
SO_PEEK_OFF = getattr(socket, "SO_PEEK_OFF", 42)
#: The shortest a linger adapts down to (a fast sender); the thread's NAP_MIN_NS.
LINGER_FLOOR_S = 20e-6
#: A slab this large in bytes is not small, whatever its count (the thread's NAP_BYTES):
#: a sender's send buffer (``net.core.wmem_default``, 208 KiB) holds about fifteen 10 KB
#: datagrams, so a fast sender of large values blocks long before the queue is full, and
#: a linger that waited for a count of them would stall it.
LINGER_BYTES = 32 * 1024
#: What a linger aims to bring (the thread's NAP_TARGET): three quarters of a slab, so a
#: steady moderate rate costs one wake-up a slab, and a burst still fits the slab.
LINGER_TARGET = SLAB * 3 // 4


class ReadStage(Protocol):
    """The pipeline as the reader sees it (``Pipeline``): the reader's only calls up, told
    where a slab and a drain end (never per datagram), for the pipeline to act on them."""

    def after_slab(self, peeked: tuple[int, int] | None, /) -> None:
        """A slab was admitted (``journalled`` only): journal it, then take it off the
        queue (``peeked``: socket fd, datagrams peeked; None when the socket cannot peek)."""

    def after_drain(self) -> None:
        """A drain ended (every wake-up, even an empty one): send what it sealed."""


class DatagramReader:
    """Reads every queued datagram when the socket becomes readable."""

    def __init__(
        self,
        sock: socket.socket,
        handle: Callable[[bytes], object],
        stage: ReadStage,
        max_datagram_bytes: int,
        *,
        admit_run: Callable[[list[bytes]], object] | None = None,
        journalled: bool = False,
        linger_us: int = 0,
    ):
        self.sock = sock
        #: Told where each slab (with ``journalled``) and each drain ends.
        self.stage = stage
        #: After a drain that took a few datagrams (not none), stop watching the socket up to
        #: this long, so the next wake-up takes more (:func:`read_linger_us`; 0: never).
        self.linger_us = linger_us
        #: The next linger: adapts to the rate (:meth:`_linger_over`), 20 µs..``linger_us``.
        self._linger_s = linger_us / 1e6
        self._resume: asyncio.TimerHandle | None = None
        #: Bytes the last :meth:`drain` took (with its count, whether a slab was small).
        self.drained_bytes = 0
        self._handle = handle
        #: Admits a slab's datagrams in order, in one call (``Intake.admit_datagrams``; by
        #: default ``handle`` for each): the compiled reader's.
        self.admit_run = admit_run or self._admit_each
        #: With a write-ahead journal: ``stage.after_slab`` after each slab read on the loop
        #: (every ``SLAB`` datagrams for the Python reader), which writes the journal, then
        #: takes the slab off the queue.
        self.journalled = journalled
        #: Read on the loop whatever the queue's length (a journal must see a slab before the
        #: next is read: slabs waiting on a receive thread would die with the process).
        self.reads_on_loop = journalled
        #: Reads leave the datagrams queued (MSG_PEEK, SO_PEEK_OFF) until ``after_slab``.
        self.peek = False
        # One byte more than the limit, so an oversized datagram is seen as such, not
        # truncated.  Anonymous mmap: pages cost memory only once a datagram that large
        # has been written into them (a zero-filled bytearray would cost it all up front).
        self._buffer = mmap.mmap(-1, max_datagram_bytes + 1)
        self._view = memoryview(self._buffer)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._open(max_datagram_bytes)
        if journalled:
            self.start_peeking()

    def _open(self, max_datagram_bytes: int) -> None:
        """What a subclass sets up besides the buffer (the receive thread)."""

    def _admit_each(self, datagrams: list[bytes]) -> None:
        for data in datagrams:
            self._handle(data)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.sock.fileno(), self._on_readable)

    def _on_readable(self) -> None:
        """Drain; after a small slab, linger before watching again."""
        self._linger_after(self.drain())

    def _linger_after(self, count: int) -> None:
        loop = self._loop
        small = 0 < count < SLAB and self.drained_bytes < LINGER_BYTES
        if small and self.linger_us and loop is not None:
            loop.remove_reader(self.sock.fileno())
            self._resume = loop.call_later(self._linger_s, self._linger_over)

    @property
    def next_linger_s(self) -> float:
        """How long the next linger lasts (it adapts to the rate)."""
        return self._linger_s

    @property
    def lingering(self) -> bool:
        """Whether the reader waits out a linger now (the socket is not watched)."""
        return self._resume is not None

    def _linger_over(self) -> None:
        """Watch again, and take what came meanwhile, which says the rate: the next linger
        is halved when a slab or more came (or ``LINGER_BYTES``), so a fast sender never
        finds the kernel queue, or its send buffer, full meanwhile; lengthened towards
        ``LINGER_TARGET`` datagrams (at most doubled, up to ``linger_us``) when fewer did."""
        self._resume = None
        if self._loop is None:
            return
        self._loop.add_reader(self.sock.fileno(), self._on_readable)
        count = self.drain()
        if count >= SLAB or self.drained_bytes >= LINGER_BYTES:
            self._linger_s = max(self._linger_s / 2, LINGER_FLOOR_S)
        elif count < LINGER_TARGET:
            grow = LINGER_TARGET / count if count > LINGER_TARGET // 2 else 2.0
            self._linger_s = min(self._linger_s * grow, self.linger_us / 1e6)
        self._linger_after(count)

    def stop(self) -> None:
        """Stop watching the socket (datagrams keep queueing in the kernel)."""
        if self._resume is not None:
            self._resume.cancel()
            self._resume = None
        elif self._loop is not None:
            self._loop.remove_reader(self.sock.fileno())
        self._loop = None

    def close_after_final_drain(self, refuse_new: bool) -> None:
        """Shutdown: take what is queued, then close.

        ``refuse_new`` (our own socket, not systemd's): shut the receive side
        first, so a sender that is still connected gets EPIPE instead of
        queueing a datagram that ``close()`` would silently drop.  A shut,
        empty non-blocking socket still answers EAGAIN, which ends the drain
        (a 0-byte read is a real, empty datagram, and is counted).
        """
        self.stop()
        if refuse_new:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RD)
        while self.drain():
            pass
        self.sock.close()

    def drain(self) -> int:
        """Handle every datagram queued right now (bounded per call); returns how many."""
        count = self._drain_socket(_MAX_PER_WAKEUP)
        self.stage.after_drain()
        return count

    def _drain_socket(self, limit: int) -> int:
        recv_into = self.sock.recv_into
        view = self._view
        handle = self._handle
        after_slab = self.stage.after_slab if self.journalled else None
        flags = socket.MSG_PEEK if self.peek else 0
        count = unsettled = taken_bytes = 0
        try:
            while count < limit:
                size = recv_into(view, 0, flags)
                handle(view[:size].tobytes())
                taken_bytes += size
                count += 1
                unsettled += 1
                if after_slab is not None and unsettled == SLAB:
                    after_slab(self._peeked(unsettled))
                    unsettled = 0
        except (BlockingIOError, InterruptedError):
            pass
        if after_slab is not None and unsettled:
            after_slab(self._peeked(unsettled))
        self.drained_bytes = taken_bytes
        return count

    def _peeked(self, count: int) -> tuple[int, int] | None:
        """What ``stage.after_slab`` is told: (socket fd, ``count``) when peeking, else None."""
        return (self.sock.fileno(), count) if self.peek else None

    def start_peeking(self) -> bool:
        """Leave what is read queued until the journal has it (False: the kernel cannot)."""
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, SO_PEEK_OFF, 0)  # a crashed run's is reset
        except OSError as error:
            log.warning(
                "journal: the socket cannot peek (%s): a crash may lose the datagrams being "
                "read at that moment",
                error,
            )
            return False
        self.peek = True
        qlen = kernel_queue_length()
        if qlen is not None and qlen < DEEP_QLEN:
            log.warning(
                "journal: the socket's kernel queue holds %d datagrams "
                "(net.unix.max_dgram_qlen), so each journal write covers at most %d: about "
                "2 µs of daemon CPU per message; with 512 (systemd/sysctl.d) about 0.1 µs",
                qlen,
                qlen + 1,
            )
        return True


class ThreadedDatagramReader(DatagramReader):
    """The compiled intake's reader: ``recvmmsg``, on a thread without the GIL or on the loop.

    The thread fills slabs of up to 64 datagrams and signals an eventfd; the loop
    takes slabs in order.  With every slab full and untaken the thread stops
    reading, so the kernel queue fills and senders block (or get EAGAIN), exactly
    as when a single-threaded daemon falls behind.  While the thread is stopped
    (before ``start``, after ``stop``), or not used (``threaded`` False, a short
    kernel queue), :meth:`drain` reads the socket itself on the loop, a slab per
    ``recvmmsg``, after the slabs the thread left.
    """

    #: Whether :meth:`start` starts the receive thread (else the loop watches the socket).
    threaded: bool

    def _open(self, max_datagram_bytes: int) -> None:
        assert compiled is not None
        qlen = kernel_queue_length()
        forced = os.environ.get(RECEIVE_ENV)
        self.threaded = receive_on_thread(qlen, forced) and not (
            self.reads_on_loop and forced != "thread"
        )
        self._receiver = compiled.Receiver(
            self.sock.fileno(), max_datagram_bytes, nap_us=self.linger_us if self.threaded else 0
        )
        #: Taken from a slab but not handled yet (a drain stopped at its cap).
        self._taken: list[bytes] = []

    def start(self) -> None:
        if not self.threaded:
            super().start()  # the loop watches the socket
            return
        self._loop = asyncio.get_running_loop()
        self._receiver.start()
        self._loop.add_reader(self._receiver.wake_fd, self.drain)

    def stop(self) -> None:
        """Stop the thread (what it read stays to be taken) and the loop's watch."""
        if not self.threaded:
            super().stop()
            return
        if self._loop is not None:
            self._loop.remove_reader(self._receiver.wake_fd)
            self._loop = None
        self._receiver.stop()

    def drain(self) -> int:
        """Handle what the thread has read (then, if it is stopped, the socket's queue)."""
        self.drained_bytes = 0  # counted for the loop's own reads (the thread naps itself)
        count = 0
        while count < _MAX_PER_WAKEUP:
            taken = self._taken or (self._receiver.take() if self.threaded else None)
            if not taken:
                break
            room = _MAX_PER_WAKEUP - count
            if len(taken) > room:
                taken, self._taken = taken[:room], taken[room:]
            else:
                self._taken = []
            self.admit_run(taken)
            count += len(taken)
        if not self._receiver.running and count < _MAX_PER_WAKEUP:
            count += self._drain_socket(_MAX_PER_WAKEUP - count)
        self.stage.after_drain()
        return count

    def _drain_socket(self, limit: int) -> int:
        """Read on the loop, a slab per ``recvmmsg``, until the socket is empty or ``limit``
        are handled."""
        receiver = self._receiver
        read_now = receiver.read_now
        admit_run = self.admit_run
        after_slab = self.stage.after_slab if self.journalled else None
        fd = self.sock.fileno() if self.peek else -1  # (``_peeked``, inline: once per slab)
        bytes_before = receiver.read_bytes
        count = 0
        while count < limit:
            datagrams = read_now(limit - count)
            if datagrams is None:
                break
            admit_run(datagrams)
            taken = len(datagrams)
            count += taken
            if after_slab is not None:
                after_slab((fd, taken) if fd >= 0 else None)
        self.drained_bytes = receiver.read_bytes - bytes_before
        return count

    def start_peeking(self) -> bool:
        if not super().start_peeking():
            return False
        self._receiver.peek = True
        return True


def datagram_reader(
    sock: socket.socket,
    handle: Callable[[bytes], object],
    stage: ReadStage,
    max_datagram_bytes: int,
    admit_run: Callable[[list[bytes]], object] | None = None,
    *,
    journalled: bool = False,
    batch_delay_ms: float = 0.0,
) -> DatagramReader:
    """The compiled intake's threaded reader where it is built, else the Python one.

    Called once at startup, so it also says which intake runs (a warning when the
    extension was not built: the daemon works, at a higher CPU cost per message).
    ``journalled``: with the write-ahead journal, every slab is read on the event loop,
    peeked, and taken off the queue by ``stage.after_slab`` once it is journalled.
    ``batch_delay_ms``: how long messages wait for their batch, which bounds the read
    linger (:func:`read_linger_us`).
    """
    linger_us = read_linger_us(kernel_queue_length(), batch_delay_ms)
    if compiled is None:
        level = logging.INFO if PYTHON_BY_CHOICE else logging.WARNING
        log.log(level, "intake: %s", INTAKE_DESCRIPTION)
    else:
        try:
            threaded = ThreadedDatagramReader(
                sock, handle, stage, max_datagram_bytes, admit_run=admit_run,
                journalled=journalled, linger_us=linger_us,
            )  # fmt: skip
            where = "on its own thread" if threaded.threaded else "on the event loop"
            log.info("intake: compiled (recvmmsg %s)", where)
            return threaded
        except OSError as error:  # no address space for the slabs (strict overcommit)
            log.warning("receive thread unavailable (%s): reading on the event loop", error)
    return DatagramReader(
        sock, handle, stage, max_datagram_bytes, journalled=journalled, linger_us=linger_us
    )
