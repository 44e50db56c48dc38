"""The ``to_pulsar`` CLI's send loop: one paced or unpaced run, its progress line, its summary,
and with ``--confirm`` the wait for the daemon's confirmations.

Standard library only (the CLI module around it is the one that imports click).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Mapping
from types import FrameType
from typing import TYPE_CHECKING, TextIO

from .encoding import encode_any_partition, encode_message_record, encode_partition_key
from .errors import SendTimeoutError

if TYPE_CHECKING:
    from .stream import StreamSender

# Unpaced load generation looks at the clock (and the progress line) once per chunk.
CHUNK = 1024
PROGRESS_PERIOD = 0.1  # seconds: at most ~10 progress redraws per second


def encoder(
    topic: str,
    value: bytes,
    key: bytes,
    partition_key: int | None,
    properties: Mapping[str, str] | None = None,
    deliver_at_ms: int | None = None,
    deliver_after_ms: int | None = None,
) -> Callable[[int], bytes]:
    """Bind everything but the timestamp, which may change per send."""
    if properties or deliver_at_ms is not None or deliver_after_ms is not None:
        return lambda ts: encode_message_record(
            topic, value, key, ts, partition_key, properties, deliver_at_ms, deliver_after_ms
        )
    if partition_key is None:
        return lambda ts: encode_any_partition(topic, value, key, ts)
    return lambda ts: encode_partition_key(partition_key, topic, value, key, ts)


def _rate(sent: int, elapsed: float) -> float:
    return sent / elapsed if elapsed > 0 else 0.0


def summary(sent: int, elapsed: float, total: int | None = None) -> str:
    """``sent N messages in X s (R msg/s)``, with ``of TOTAL`` when the run stopped early."""
    of = "" if total is None else f" of {total}"
    noun = "message" if sent == 1 and total is None else "messages"
    return f"sent {sent}{of} {noun} in {elapsed:.2f} s ({_rate(sent, elapsed):.0f} msg/s)"


class Progress:
    """A ``\\r``-rewritten progress line on stderr, redrawn at most every PROGRESS_PERIOD."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self._total = total
        self._stream = stream
        self._width = 0
        self._started = self._next_draw = time.perf_counter()

    def start(self, started: float) -> None:
        self._started = self._next_draw = started

    def tick(self, sent: int) -> None:
        """Called once per chunk of sends: redraw if the period has passed."""
        now = time.perf_counter()
        if now >= self._next_draw:
            self._draw(sent, now)
            self._next_draw = now + PROGRESS_PERIOD

    def finish(self, sent: int) -> None:
        """Draw the final state and end the line, so what follows starts on its own line."""
        self._draw(sent, time.perf_counter())
        self._stream.write("\n")
        self._stream.flush()

    def _draw(self, sent: int, now: float) -> None:
        elapsed = now - self._started
        line = (
            f"sent {sent}/{self._total} ({sent * 100 // self._total}%)"
            f"  {_rate(sent, elapsed):.0f} msg/s  {elapsed:.1f} s"
        )
        # Pad over the previous line: no terminal escapes, so a pipe gets plain text too.
        self._stream.write("\r" + line.ljust(self._width))
        self._stream.flush()
        self._width = len(line)


class Run:
    """Send ``count`` messages, message i due at start + i * interval (no drift).

    The per-message loop does nothing but send and test one flag (plus the sleep when
    paced, and the timestamp when it is "now"): counting and the clock are per chunk.

    Ctrl-C must not land between a send returning and it being counted, so while the
    run lasts SIGINT only raises a flag, which the loops check after each send; it
    raises KeyboardInterrupt at once while the run sleeps between paced sends (no send
    in flight) and on a second Ctrl-C (e.g. stuck on a full queue). ``sent`` is then
    exact after ``run()`` returns or raises (but for that second Ctrl-C: within one).
    """

    def __init__(
        self,
        send: Callable[[bytes], None],
        encode: Callable[[int], bytes],
        timestamp_ms: int | None,
        count: int,
        interval_us: int,
        progress: Progress | None,
    ) -> None:
        self._send = send
        self._encode = encode
        self._timestamp_ms = timestamp_ms
        self._count = count
        self._interval = interval_us / 1_000_000
        self._progress = progress
        self.sent = 0
        self.started = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def run(self) -> None:
        interrupted = sleeping = False

        def on_sigint(signum: int, frame: FrameType | None) -> None:
            nonlocal interrupted
            if sleeping or interrupted:
                raise KeyboardInterrupt
            interrupted = True

        send, encode, count = self._send, self._encode, self._count
        interval, progress = self._interval, self._progress
        fixed = None if self._timestamp_ms is None else encode(self._timestamp_ms)
        # Paced: chunks last about one progress period (sleeps dominate anyway).
        chunk = min(CHUNK, max(1, int(PROGRESS_PERIOD / interval))) if interval else CHUNK
        perf_counter, sleep, time_ns = time.perf_counter, time.sleep, time.time_ns
        datagram, last_ms = fixed or b"", -1
        done = i = 0
        # Only replace Python's default: keep an inherited SIG_IGN (nohup) or an embedder's.
        previous_sigint = signal.getsignal(signal.SIGINT)
        own_sigint = (
            previous_sigint is signal.default_int_handler
            and threading.current_thread() is threading.main_thread()
        )
        if own_sigint:
            signal.signal(signal.SIGINT, on_sigint)
        start = self.started = perf_counter()
        if progress is not None:
            progress.start(start)
        try:
            while done < count:
                n = min(chunk, count - done)
                for i in range(n):
                    if interval:
                        delay = start + (done + i) * interval - perf_counter()
                        if delay > 0:
                            sleeping = True
                            if interrupted:  # Ctrl-C came just before: message i not sent
                                raise KeyboardInterrupt
                            sleep(delay)
                            sleeping = False
                    if fixed is None:
                        # Re-encode only when the millisecond changes: same bytes, less work.
                        ms = time_ns() // 1_000_000
                        if ms != last_ms:
                            datagram, last_ms = encode(ms), ms
                    send(datagram)
                    if interrupted:
                        i += 1  # message i was sent
                        raise KeyboardInterrupt
                done, i = done + n, 0  # from here on, ``done`` alone is what was sent
                if progress is not None:
                    progress.tick(done)
        except BaseException as exc:
            self.sent = done + i  # message i failed or was not sent
            if interrupted and not isinstance(exc, KeyboardInterrupt):
                # e.g. a send stuck on a full queue timed out after Ctrl-C: report Ctrl-C.
                raise KeyboardInterrupt from exc
            raise
        finally:
            if own_sigint:
                signal.signal(signal.SIGINT, previous_sigint)
        self.sent = done


class Unconfirmed(Exception):
    """--confirm: everything was sent, but not everything was acked (one-line message)."""


def confirm_all(stream: StreamSender, count: int, timeout: float) -> None:
    """--confirm: flush, and fail with one line unless every message was acked."""
    try:
        result = stream.flush()
    except SendTimeoutError as exc:
        raise Unconfirmed(
            f"no confirmation from the daemon within {timeout:g} s "
            f"({stream.unconfirmed} of {count} {_noun(count)} unconfirmed): the broker has "
            "not acknowledged them (is it down? `pulsar-bruce status` shows the daemon's "
            "connections); the daemon keeps them and delivers them once it can, so sending "
            "them again may duplicate them"
        ) from exc
    if not result.ok:
        raise Unconfirmed(
            f"{result.discarded_total} of {result.total} {_noun(result.total)} discarded "
            f"({result.describe_discards()})"
        )


def _noun(count: int) -> str:
    return "message" if count == 1 else "messages"
