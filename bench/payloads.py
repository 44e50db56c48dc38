"""Values the benches send: random bytes, or JSON-like records that compress as logs do;
and, for paced runs, the schedule and the stamp (send time, sequence) each value starts with.

Random bytes are the worst case for a codec (LZ4 saves about 2 % on them, so the
daemon sends such batches uncompressed); real traffic is mostly records with
repeated field names, timestamps, ids and short strings, which LZ4 shrinks by
about half to two thirds. Both come from a seeded generator, so every run (and
each side of a comparison) sends the same values.
"""

from __future__ import annotations

import itertools
import json
import random
import struct
import time
from collections.abc import Iterator
from typing import Any

#: Latency stamp at the head of each value: send time (ns since the epoch) and sequence
#: number; warm-up messages carry sequence -1 and are ignored by the consumer. Order-checked
#: runs put the sender's id where the send time goes.
STAMP = struct.Struct(">qq")

#: ``--payload`` choices.
KINDS = ("random", "json")

#: Enough distinct payloads that a 128 KiB batch never repeats one (keeps LZ4 honest).
_POOL_BYTES = 16 * 1024 * 1024
_POOL_MAX = 4096

_EVENTS = ("login", "logout", "page_view", "purchase", "search", "add_to_cart", "error", "retry")
_SERVICES = ("checkout", "catalog", "auth", "search", "billing", "gateway")
_STATUSES = (200, 200, 200, 200, 201, 204, 301, 400, 404, 500)
#: What the ``msg`` field is made of.
_TEXT = (
    "request served from cache after upstream timeout user session token refreshed order "
    "payment accepted declined retry queue worker batch flushed index rebuilt shard "
    "replica lag commit offset checkpoint latency budget exceeded warning connection pool "
    "exhausted item price currency region eu us ap west east north south version build "
    "deploy canary"
)
_WORDS = tuple(_TEXT.split())


def json_record(rng: random.Random, size: int, serial: int) -> bytes:
    """One JSON object of exactly ``size`` bytes (ASCII): an event as a service logs it."""
    seconds = 1_764_000_000 + serial // 50
    record: dict[str, object] = {
        "ts": f"2025-11-24T{seconds // 3600 % 24:02d}:{seconds // 60 % 60:02d}:"
        f"{seconds % 60:02d}.{rng.randrange(1_000_000):06d}Z",
        "event": rng.choice(_EVENTS),
        "svc": rng.choice(_SERVICES),
        "host": f"web-{rng.randrange(40):02d}",
        "user": rng.randrange(1_000_000),
        "req": f"{rng.getrandbits(64):016x}",
        "status": rng.choice(_STATUSES),
        "ms": round(rng.expovariate(1 / 40), 2),
    }
    head = json.dumps(record, separators=(",", ":"))[:-1]
    room = size - len(head) - len(',"msg":""}')
    if room < 0:  # too small for the fields: as many of its characters as fit
        return (head + "}").encode()[:size].ljust(size)
    words = " ".join(rng.choices(_WORDS, k=room // 4 + 2))[:room]
    return f'{head},"msg":"{words}"}}'.encode()


def payload_pool(
    size: int, kind: str = "random", seed: int = 0, count: int | None = None
) -> list[bytes]:
    """``count`` distinct payloads of ``size`` bytes (by default enough for a batch of
    distinct ones): ``random`` (incompressible) or ``json``."""
    count = count or max(64, min(_POOL_MAX, _POOL_BYTES // max(size, 1)))
    rng = random.Random(f"{kind}-{size}-{seed}")
    if kind == "random":
        return [rng.randbytes(size) for _ in range(count)]
    if kind == "json":
        return [json_record(rng, size, serial) for serial in range(count)]
    raise ValueError(f"unknown payload kind {kind!r} (one of {', '.join(KINDS)})")


def paced(rate: float, n: int) -> Iterator[int]:
    """Yield 0..n-1 on a fixed schedule of ``rate`` per second, sleeping between bursts.

    Sleeping (rather than spinning) keeps the pacer off the CPU the daemon and the
    broker need; it sleeps until the next message is due (at least 0.5 ms), so a slow
    sender wakes once per message, not more; messages due while it slept go out back to
    back on wake-up.
    """
    start = time.monotonic()
    sent = 0
    while sent < n:
        due = min(n, int((time.monotonic() - start) * rate) + 1)
        while sent < due:
            yield sent
            sent += 1
        if sent < n:
            time.sleep(max(0.0005, start + sent / rate - time.monotonic()))


def values(p: dict[str, Any]) -> list[bytes]:
    """The run's payloads (``payload``: random or json, ``seed``, ``pool``: how many); in
    paced runs each less the stamp that goes before it."""
    size = p["size"] - STAMP.size if p.get("rate") else p["size"]
    kind, seed = p.get("payload", "random"), p.get("seed", 0)
    return payload_pool(max(size, 0), kind, seed, p.get("pool"))


def stamped_values(p: dict[str, Any]) -> Iterator[bytes]:
    """Paced at ``rate``: ``messages`` values, each stamped with its send time and its
    sequence number (from ``seq_base``: senders of one topic number apart)."""
    pack, time_ns, base = STAMP.pack, time.time_ns, p.get("seq_base", 0)
    bodies = itertools.cycle(values(p))
    for seq in paced(p["rate"], p["messages"]):
        yield pack(time_ns(), base + seq) + next(bodies)
