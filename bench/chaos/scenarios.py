"""The chaos scenarios of issue 4, point 2, each against real processes.

Every scenario takes a ``Broker`` (``tests/support/processes.py``: a pulsar-lite process
that can be SIGKILLed and restarted on the same port and data dir) and/or a
``start_daemon(service_url, *args) -> Daemon`` factory, drives one fault, reads
every value back with the official client and returns an :class:`Outcome`: the
figures, and the list of expectations that did not hold (empty: passed).

The same functions run in a short form in ``tests/integration/test_chaos.py``
and in a long form from ``bench/chaos/run.py``.  The one scenario without a real
broker (a server that never answers) is in ``bench/chaos/silent_scenario.py``.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable

from bench.chaos.tools import (
    Outcome,
    Stream,
    broker_connections,
    final_counts,
    nonzero,
    read_back,
    runs,
    unique_topic,
)
from tests.support.processes import Broker, Daemon, wait_for

StartDaemon = Callable[..., Daemon]


def _few(seqs: list[int], limit: int = 10) -> str:
    shown = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs(seqs)[:limit])
    return f"{len(seqs)} ({shown}{', ...' if len(runs(seqs)) > limit else ''})"


def _wait_stream(stream: Stream, at_least: int, timeout: float) -> None:
    wait_for(
        lambda: stream.sent >= at_least or not stream.is_alive(),
        timeout,
        f"the sender to pass {at_least} messages",
    )


# -- a. the broker SIGKILLed and restarted during a stream --------------------------------------


def broker_restarts(
    broker: Broker,
    start_daemon: StartDaemon,
    *,
    messages: int,
    rate: float,
    restarts: int = 2,
    down_s: float = 0.0,
    value_size: int = 64,
    timeout: float = 60.0,
) -> Outcome:
    """SIGKILL the broker ``restarts`` times, evenly spread over a stream of ``messages``
    at ``rate``/s, each time waiting until the daemon has lost its connections, keeping the
    broker down ``down_s`` more seconds, then restarting it on the same port and data dir.

    Expected: every value read back, no discards, the accounting identity, and no more
    duplicates read back than ``possible_duplicates`` counted.
    """
    out = Outcome(f"broker SIGKILLed and restarted {restarts}x during {messages:,} messages")
    daemon = start_daemon(broker.url)
    topic = unique_topic("chaos-restart")
    daemon.warm_up(topic, broker.partitions)
    stream = Stream(daemon.socket_path, topic, messages, rate, value_size)
    started = time.monotonic()
    stream.start()
    kills = []
    for k in range(1, restarts + 1):
        _wait_stream(stream, messages * k // (restarts + 1), timeout)
        kills.append(stream.sent)
        broker.kill()
        wait_for(lambda: broker_connections(daemon) == 0, 10, "the daemon to lose the broker")
        if down_s:
            time.sleep(down_s)  # the outage itself (scenario shaping, not synchronisation)
        broker.start()
    stream.join(timeout)
    stream_s = time.monotonic() - started
    counters = daemon.wait_settled(stream.sent + 1, timeout)
    settle_s = time.monotonic() - started
    back = read_back(broker.url, topic, stream.sent, timeout)
    expected = range(stream.sent)
    lost = back.missing(expected)
    unexpected = back.unexpected(expected)
    discards = nonzero(counters.discarded)

    out.figures.update(
        {
            "sent": f"{stream.sent:,} at {rate:,.0f}/s in {stream_s:.1f} s (+1 warm-up)",
            "broker killed after": ", ".join(f"{n:,}" for n in kills) + " messages",
            "received": f"{counters.received:,}",
            "acked": f"{counters.acked:,}",
            "discarded": discards or 0,
            "buffered": counters.buffered,
            "possible_duplicates": f"{counters.possible_duplicates:,}",
            "read back": f"{back.total:,} messages, {back.distinct:,} distinct values "
            f"in {back.seconds:.1f} s{back.how()}",
            "lost": len(lost),
            "duplicates read back": back.duplicates,
            "identity": "holds" if counters.identity_holds() else "BROKEN",
            "settled after": f"{settle_s:.1f} s",
        }
    )
    out.expect(stream.error is None, f"sender failed: {stream.error!r}")
    out.expect(stream.sent == messages, f"sender stopped at {stream.sent} of {messages}")
    out.expect(counters.received == stream.sent + 1, "received != sent + 1 (warm-up)")
    out.expect(counters.acked == counters.received, "acked != received")
    out.expect(not discards, f"discards: {discards}")
    out.expect(counters.buffered == 0, f"{counters.buffered} still buffered")
    out.expect(counters.identity_holds(), f"accounting identity broken: {counters}")
    out.expect(not lost, f"lost: {_few(lost)}")
    out.expect(not unexpected, f"values never sent read back: {_few(unexpected)}")
    out.expect(
        back.duplicates <= counters.possible_duplicates,
        f"{back.duplicates} duplicates read back, only {counters.possible_duplicates} counted",
    )
    return out


# -- b. the broker down for a while at a steady load, no spool ------------------------------------


def broker_outage(
    broker: Broker,
    start_daemon: StartDaemon,
    *,
    messages: int,
    rate: float,
    down_s: float,
    buffer_max_bytes: int,
    kill_at: float = 0.2,
    value_size: int = 100,
    timeout: float = 60.0,
    spool_dir: str | None = None,
) -> Outcome:
    """A steady stream of ``messages`` at ``rate``/s; after ``kill_at`` of it the broker is
    SIGKILLed and kept down ``down_s`` seconds (at that load) with a ``buffer_max_bytes``
    buffer too small to hold the outage, then restarted.

    Expected: ``acked + buffer_full == received == sent`` exactly, no other discard, and
    the values read back are exactly as many as were acked (no silent loss, no phantom).
    With ``spool_dir`` (the disk spool on): no ``buffer_full`` at all, everything acked.
    """
    out = Outcome(
        f"broker down {down_s:g} s at {rate:,.0f} msg/s, --buffer-max-bytes {buffer_max_bytes}"
        + (", with the disk spool" if spool_dir else ", no spool")
    )
    spool_args = ["--spool-dir", spool_dir, "--send-timeout-s", "0"] if spool_dir else []
    daemon = start_daemon(broker.url, "--buffer-max-bytes", str(buffer_max_bytes), *spool_args)
    topic = unique_topic("chaos-outage")
    daemon.warm_up(topic, broker.partitions)
    stream = Stream(daemon.socket_path, topic, messages, rate, value_size)
    stream.start()
    _wait_stream(stream, int(messages * kill_at), timeout)
    broker.kill()
    killed_at = stream.sent
    wait_for(lambda: broker_connections(daemon) == 0, 10, "the daemon to lose the broker")
    time.sleep(down_s)  # the outage itself, at the stream's steady load (scenario shaping)
    restarted_at = stream.sent
    broker.start()
    reconnected = wait_for(
        lambda: broker_connections(daemon) > 0 and stream.sent, timeout, "a reconnect"
    )
    stream.join(timeout + messages / rate)
    counters = daemon.wait_settled(stream.sent + 1, timeout)
    back = read_back(broker.url, topic, max(counters.acked - 1, 0), timeout)
    expected = range(stream.sent)
    missing = back.missing(expected)
    unexpected = back.unexpected(expected)
    buffer_full = counters.discarded.get("buffer_full", 0)
    others = nonzero({k: v for k, v in counters.discarded.items() if k != "buffer_full"})
    acked_values = counters.acked - 1  # the warm-up is acked too

    out.figures.update(
        {
            "sent": f"{stream.sent:,} at {rate:,.0f}/s (+1 warm-up)",
            "outage": f"broker killed after {killed_at:,} messages, restarted after "
            f"{restarted_at:,}; reconnected after {reconnected:,}",
            "received": f"{counters.received:,}",
            "acked": f"{counters.acked:,}",
            "buffer_full": f"{buffer_full:,}",
            "acked + buffer_full": f"{counters.acked + buffer_full:,}",
            "other discards": others or 0,
            "buffered": counters.buffered,
            "possible_duplicates": counters.possible_duplicates,
            "read back": f"{back.total:,} messages, {back.distinct:,} distinct values"
            f"{back.how()}",
            "not read back": f"{len(missing):,} in {len(runs(missing))} run(s): "
            + ", ".join(f"{a}-{b}" for a, b in runs(missing)[:5]),
            "duplicates read back": back.duplicates,
            "identity": "holds" if counters.identity_holds() else "BROKEN",
        }
    )
    out.expect(stream.error is None, f"sender failed: {stream.error!r}")
    out.expect(counters.received == stream.sent + 1, "received != sent + 1 (warm-up)")
    out.expect(
        counters.acked + buffer_full == counters.received,
        f"acked {counters.acked} + buffer_full {buffer_full} != received {counters.received}",
    )
    if spool_dir:
        out.expect(buffer_full == 0, f"{buffer_full} discarded as buffer_full despite the spool")
    else:
        out.expect(buffer_full > 0, "the buffer never overflowed: shrink it or raise the load")
    out.expect(not others, f"other discards: {others}")
    out.expect(counters.buffered == 0, f"{counters.buffered} still buffered")
    out.expect(counters.identity_holds(), f"accounting identity broken: {counters}")
    out.expect(
        back.distinct == acked_values,
        f"{back.distinct} distinct values read back, {acked_values} acked",
    )
    out.expect(
        len(missing) == buffer_full,
        f"{len(missing)} values not read back, {buffer_full} counted as buffer_full",
    )
    out.expect(not unexpected, f"values never sent read back: {_few(unexpected)}")
    out.expect(
        back.duplicates <= counters.possible_duplicates,
        f"{back.duplicates} duplicates read back, only {counters.possible_duplicates} counted",
    )
    return out


# -- c. the daemon SIGTERMed under load ---------------------------------------------------------


def daemon_sigterm(
    broker: Broker,
    start_daemon: StartDaemon,
    *,
    after: int,
    rate: float = 0.0,
    max_messages: int = 10_000_000,
    value_size: int = 64,
    count_socket_loss: bool = True,
    timeout: float = 60.0,
) -> Outcome:
    """A sender streams (``rate``/s, 0: flat out); after ``after`` messages the daemon gets
    SIGTERM (default 30 s shutdown timeout); the sender stops at its first error.

    Expected: exit 0; every datagram the daemon received was acked (none discarded as
    ``shutdown``) and reads back.  With ``count_socket_loss``, also: every datagram the
    sender got through (``send()`` returned) was received -- none was left in the socket
    queue when the daemon closed it.
    """
    out = Outcome(f"daemon SIGTERMed under load after {after:,} messages")
    daemon = start_daemon(broker.url)
    topic = unique_topic("chaos-sigterm")
    daemon.warm_up(topic, broker.partitions)
    stream = Stream(daemon.socket_path, topic, max_messages, rate, value_size)
    stream.start()
    _wait_stream(stream, after, timeout)
    at_signal = stream.sent
    signalled = time.monotonic()
    daemon.process.send_signal(signal.SIGTERM)
    try:
        returncode: int | None = daemon.process.wait(timeout)
    except subprocess.TimeoutExpired:
        returncode = None
    exit_s = time.monotonic() - signalled
    stream.join(10)
    log = daemon.log()
    final = final_counts(log)
    received = final.received - 1 if final else 0  # the warm-up is received too
    back = read_back(broker.url, topic, received, timeout)
    lost_in_socket = list(range(received, stream.sent))
    lost = back.missing(range(received))
    unexpected = back.unexpected(range(received))

    out.figures.update(
        {
            "sent": f"{stream.sent:,} ({at_signal:,} at SIGTERM; rate "
            f"{'flat out' if not rate else f'{rate:,.0f}/s'}; +1 warm-up)",
            "sender stopped by": repr(stream.error),
            "exit": f"{returncode} after {exit_s:.2f} s",
            "daemon's last line": (
                f"received {final.received:,}, acked {final.acked:,}, "
                f"discarded {final.discarded:,}"
                if final
                else "MISSING"
            ),
            "sent but never received": f"{len(lost_in_socket)}"
            + (f" ({_few(lost_in_socket)})" if lost_in_socket else ""),
            "read back": f"{back.total:,} messages, {back.distinct:,} distinct values"
            f"{back.how()}",
            "received but not read back": len(lost),
        }
    )
    from to_pulsar.errors import ToPulsarError

    out.expect(returncode == 0, f"exit status {returncode}")
    out.expect(
        isinstance(stream.error, ToPulsarError),
        f"the sender was not stopped by the daemon going away: {stream.error!r}",
    )
    out.expect(final is not None, "no 'stopped: ...' line in the daemon's log")
    if final is not None:
        out.expect(final.acked == final.received, "acked != received")
        out.expect(final.discarded == 0, f"{final.discarded} discarded")
        out.expect(received <= stream.sent, f"received {received} > sent {stream.sent}")
    if count_socket_loss:
        out.expect(
            not lost_in_socket,
            f"{len(lost_in_socket)} datagrams sent (send() returned) but never received: "
            "left in the socket queue at close",
        )
    out.expect("shutdown timeout" not in log, "shutdown timed out and discarded messages")
    out.expect(not lost, f"received but not read back: {_few(lost)}")
    out.expect(not unexpected, f"read back but never received: {_few(unexpected)}")
    return out
