"""The official ``pulsar-client``'s sides of ``bench/workers.py``: ``official`` (publish with
batching, ``send_async``, ``flush``) and ``consumer`` (read latency-stamped messages back).
Run in the worker's process through its ``MODES``; see that module for the protocol."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

try:
    from bench.payloads import STAMP, stamped_values, values
    from bench.worker_clock import blocked_since, peak_rss_kib, thread_clock
except ModuleNotFoundError:  # run as a script (``python bench/workers.py``): bench/ is on the path
    from payloads import STAMP, stamped_values, values  # type: ignore[no-redef]
    from worker_clock import (  # type: ignore[no-redef]
        blocked_since,
        peak_rss_kib,
        thread_clock,
    )


# -- official client --------------------------------------------------------------------------


def run_official(p: dict[str, Any], ready: Callable[[], None]) -> dict[str, Any]:
    import pulsar

    n: int = p["messages"]
    client = pulsar.Client(p["service_url"], logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    producer = client.create_producer(
        p["topic"],
        batching_enabled=True,
        block_if_queue_full=True,
        batching_max_publish_delay_ms=10,
        max_pending_messages=p["max_pending"],
        compression_type=getattr(pulsar.CompressionType, p.get("compression", "none").upper()),
    )
    ok_result = pulsar.Result.Ok
    done = threading.Event()
    state = {"receipts": 0, "errors": 0, "t_last": 0.0}
    monotonic = time.monotonic

    def on_receipt(result: Any, _message_id: Any) -> None:
        count = state["receipts"] + 1
        state["receipts"] = count
        if result != ok_result:
            state["errors"] += 1
        if count == n:
            state["t_last"] = monotonic()
            done.set()

    send = producer.send_async
    callback = on_receipt if p.get("callback", True) else None
    keyed: bool = p["keyed"]
    rate: float | None = p.get("rate")
    pool = values(p)
    ready()

    cpu0 = time.process_time()
    clock0 = thread_clock()
    t0 = monotonic()
    if rate:
        for value in stamped_values(p):
            send(value, callback)
    elif keyed:
        for i, payload in zip(range(n), itertools.cycle(pool), strict=False):
            send(payload, callback, partition_key=str(i))
    else:
        for payload in itertools.islice(itertools.cycle(pool), n):
            send(payload, callback)
    t_sent = monotonic()
    blocked = blocked_since(clock0)
    try:
        producer.flush()  # returns once every message is persisted; raises if one failed
    except Exception:  # any failure of the official client is a lost run
        state["errors"] += 1
    if callback is None:
        state["t_last"] = monotonic()
        state["receipts"] = n if not state["errors"] else 0
        done.set()
    complete = done.wait(120)
    cpu1 = time.process_time()
    producer.close()
    client.close()
    return {
        "t0": t0,
        "t_sent": t_sent,
        "t_last": state["t_last"] if complete else None,
        "receipts": state["receipts"],
        "errors": state["errors"],
        "cpu_s": cpu1 - cpu0,
        "peak_rss_kib": peak_rss_kib(),
        **blocked,
    }


# -- latency consumer -------------------------------------------------------------------------


def run_consumer(p: dict[str, Any], ready: Callable[[], None]) -> dict[str, Any]:
    import pulsar

    n: int = p["messages"]
    client = pulsar.Client(p["service_url"], logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    consumer = client.subscribe(
        p["topic"],
        f"bench-{time.monotonic_ns()}",
        initial_position=pulsar.InitialPosition.Earliest,
        receiver_queue_size=5000,
    )
    ready()

    latencies_ns: list[int] = []
    seen = bytearray(n)
    duplicates = 0
    unpack = STAMP.unpack_from
    time_ns = time.time_ns
    receive = consumer.receive
    # Give up at the deadline, or once nothing new has arrived for idle_timeout seconds.
    deadline = time.monotonic() + p["timeout"]
    idle_timeout: float = p.get("idle_timeout", 10.0)
    last_new = time.monotonic()
    message = None
    while len(latencies_ns) < n:
        now_s = time.monotonic()
        if now_s > deadline or now_s - last_new > idle_timeout:
            break
        try:
            message = receive(500)
        except pulsar.Timeout:
            continue
        now = time_ns()
        sent_ns, seq = unpack(message.data())
        if seq < 0:
            continue
        if seen[seq]:
            duplicates += 1
            continue
        seen[seq] = 1
        latencies_ns.append(now - sent_ns)
        last_new = time.monotonic()
        if len(latencies_ns) % 1000 == 0:
            consumer.acknowledge_cumulative(message)
    if message is not None:
        consumer.acknowledge_cumulative(message)
    client.close()
    latencies_ns.sort()
    return {
        "received": len(latencies_ns),
        "duplicates": duplicates,
        "latencies": _summary(latencies_ns),
    }


def _summary(sorted_ns: list[int]) -> dict[str, float]:
    if not sorted_ns:
        return {}

    def pct(q: float) -> float:
        return sorted_ns[min(len(sorted_ns) - 1, int(q * len(sorted_ns)))] / 1e6

    return {
        "p50_ms": pct(0.50),
        "p90_ms": pct(0.90),
        "p99_ms": pct(0.99),
        "p999_ms": pct(0.999),
        "max_ms": sorted_ns[-1] / 1e6,
    }
