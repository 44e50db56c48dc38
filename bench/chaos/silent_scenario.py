"""The chaos scenario without a real broker: a server that accepts and never answers.

Split from ``bench/chaos/scenarios.py`` (same conventions: takes a ``start_daemon``
factory, drives the fault, returns an :class:`Outcome`); it runs in a short form in
``tests/integration/test_chaos.py`` and in a long form from ``bench/chaos/run.py``.
"""

from __future__ import annotations

import itertools
import re
import time

from bench.chaos.scenarios import StartDaemon
from bench.chaos.tools import (
    Outcome,
    SilentBroker,
    Stream,
    final_counts,
    mib,
    nonzero,
    rss_bytes,
    unique_topic,
)
from tests.support.processes import wait_for

MiB = 1024 * 1024

# -- d. a broker that accepts the connection and never answers ---------------------------------


_RETRY = re.compile(r"partition count of \S+ unknown \((.*)\); retrying in ([\d.]+) s")


def silent_broker(
    start_daemon: StartDaemon,
    *,
    buffer_max_bytes: int = 2 * MiB,
    value_size: int = 1024,
    rate: float = 2000.0,
    connections: int = 3,
    overflow: float = 10.0,
    growth_limit: int = 16 * MiB,
    timeout: float = 60.0,
) -> Outcome:
    """The daemon's service URL points at a server that accepts TCP connections and never
    writes a byte.  A sender streams ``value_size`` B values at ``rate``/s until the server
    has seen ``connections`` connection attempts and at least ``overflow`` times the buffer
    has been sent.

    Expected: the handshake times out and is retried with a growing backoff (the log shows
    it), timed-out connections are closed, datagrams beyond ``--buffer-max-bytes`` become
    ``buffer_full``, RSS grows by less than ``growth_limit`` once the buffer is full, and
    SIGTERM (``--shutdown-timeout-s 2``) exits 0, discarding the held messages as
    ``shutdown``.
    """
    out = Outcome(f"broker that never answers, --buffer-max-bytes {mib(buffer_max_bytes)}")
    silent = SilentBroker().start()
    try:
        daemon = start_daemon(
            silent.url,
            "--buffer-max-bytes",
            str(buffer_max_bytes),
            "--shutdown-timeout-s",
            "2",
        )
        pid = daemon.process.pid
        rss_start = rss_bytes(pid)
        topic = unique_topic("chaos-silent")
        stream = Stream(daemon.socket_path, topic, 10**9, rate, value_size)
        started = time.monotonic()
        stream.start()
        full = wait_for(
            lambda: (c := daemon.counters()).discarded.get("buffer_full", 0) > 0 and c,
            timeout,
            "the buffer to fill",
        )
        rss_full = rss_bytes(pid)
        full_s = time.monotonic() - started
        rss_peak = rss_full
        enough = int(overflow * buffer_max_bytes / value_size)

        def tried_enough() -> bool:
            nonlocal rss_peak
            rss_peak = max(rss_peak, rss_bytes(pid))
            if stream.error is not None:
                raise AssertionError(f"sender failed: {stream.error!r}")
            return len(silent.accepted) >= connections and stream.sent >= enough

        wait_for(tried_enough, timeout, f"{connections} connection attempts")
        stream.stop()
        stream.join(10)
        counters = wait_for(
            lambda: (c := daemon.counters()).received >= stream.sent and c,
            timeout,
            "every datagram to be received",
        )
        rss_peak = max(rss_peak, rss_bytes(pid))
        metrics = daemon.metrics()
        buffered_bytes = int(metrics.get("pulsar_bruce_buffered_bytes", -1))
        log = daemon.log()
        retries = _RETRY.findall(log)
        delays = [float(delay) for _, delay in retries]
        gaps = [b - a for a, b in itertools.pairwise(silent.accepted)]
        accepted, closed, max_open = len(silent.accepted), silent.closed_by_peer, silent.max_open
        returncode = daemon.terminate(30)
        final = final_counts(daemon.log())
    finally:
        silent.stop()

    buffer_full = counters.discarded.get("buffer_full", 0)
    others = nonzero({k: v for k, v in counters.discarded.items() if k != "buffer_full"})
    out.figures.update(
        {
            "sent": f"{stream.sent:,} x {value_size} B = {mib(stream.sent * value_size)} "
            f"at {rate:,.0f}/s in {stream.seconds:.1f} s",
            "received": f"{counters.received:,}",
            "buffered": f"{counters.buffered:,} messages, {buffered_bytes:,} bytes",
            "buffer_full": f"{buffer_full:,} (first after {full_s:.1f} s, "
            f"{full.received:,} received)",
            "other discards": others or 0,
            "connections accepted": f"{accepted} (closed by the daemon: {closed}, "
            f"at most {max_open} open at once)",
            "seconds between attempts": ", ".join(f"{g:.1f}" for g in gaps),
            "log: retries": f"{len(retries)}: " + "; ".join(
                f"({reason or 'timeout'}) {delay} s" for reason, delay in retries[:6]
            ),
            "RSS": f"start {mib(rss_start)}, buffer full {mib(rss_full)}, "
            f"peak {mib(rss_peak)} (growth after full {mib(rss_peak - rss_full)})",
            "SIGTERM": f"exit {returncode}; last line: {final}",
        }
    )
    out.expect(accepted >= connections, f"only {accepted} connection attempts")
    out.expect(len(retries) >= connections - 1, f"only {len(retries)} retries logged")
    out.expect(
        all(b > a for a, b in itertools.pairwise(delays) if b < 48),
        f"backoff does not grow: {delays}",
    )
    out.expect(closed >= accepted - 1, f"{accepted} connections, only {closed} closed")
    out.expect(max_open <= 2, f"{max_open} connections open at once")
    out.expect(silent.bytes_received > 0, "the daemon never sent a Connect")
    out.expect(buffer_full > 0, "nothing was discarded as buffer_full")
    out.expect(not others, f"other discards: {others}")
    out.expect(counters.acked == 0, f"{counters.acked} acked by a broker that never answers")
    out.expect(counters.received == stream.sent, "received != sent")
    out.expect(
        counters.received == counters.buffered + buffer_full,
        "received != buffered + buffer_full",
    )
    out.expect(counters.identity_holds(), f"accounting identity broken: {counters}")
    out.expect(
        0 <= buffered_bytes <= buffer_max_bytes,
        f"{buffered_bytes} bytes buffered, limit {buffer_max_bytes}",
    )
    out.expect(
        rss_peak - rss_full < growth_limit,
        f"RSS grew by {mib(rss_peak - rss_full)} after the buffer was full",
    )
    out.expect(returncode == 0, f"exit status {returncode} after SIGTERM")
    out.expect(
        final is not None and final.discarded == final.received and final.acked == 0,
        f"after SIGTERM: {final}, expected every message discarded",
    )
    shutdown_line = re.search(r"shutdown timeout: discarded (\d+)", daemon.log())
    out.expect(
        shutdown_line is not None and int(shutdown_line.group(1)) == counters.buffered,
        f"expected {counters.buffered} discarded as shutdown: {shutdown_line}",
    )
    return out
