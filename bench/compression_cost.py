"""What LZ4 costs the daemon per batch, and what its fallback saves on values that do not shrink.

For random (incompressible) and JSON-like values (``bench/payloads.py``), in batches of
8 KiB (a partition's batch at moderate rates) and 128 KiB (``--batch-max-bytes``, a full
one), one process, no sockets::

    python -m bench.compression_cost

Per case, best of five runs of 2,000 batches (all different): LZ4 on every batch (what
a codec without a fallback pays), the daemon's ``CompressionTries`` (a batch that does
not save an eighth goes uncompressed, and the next 1, 2, 4 ... 64 go untried), and the
share of batches it sent compressed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pulsar_bruce.batch.compression import CODECS, CompressionTries

from bench.payloads import payload_pool

BATCHES = 2000
ROUNDS = 5


def batches(kind: str, batch_bytes: int) -> list[bytes]:
    """``BATCHES`` distinct batch payloads of about ``batch_bytes`` each."""
    pool = payload_pool(1000, kind, seed=1)
    per = max(1, batch_bytes // 1000)
    out = []
    for i in range(BATCHES):
        start = i * per % len(pool)
        out.append(b"".join(pool[(start + j) % len(pool)] for j in range(per)))
    return out


def best(run: Callable[[], None]) -> float:
    """Seconds of the fastest of ``ROUNDS`` runs."""
    times = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def measure(kind: str, batch_bytes: int) -> dict[str, float]:
    wire, lz4 = CODECS["lz4"]
    assert lz4 is not None
    data = batches(kind, batch_bytes)
    always = best(lambda: [lz4(raw) for raw in data])
    sent: list[int] = []

    def with_fallback() -> None:
        tries = CompressionTries()
        sent[:] = [tries.compress(raw, lz4, wire)[1] for raw in data]

    fallback = best(with_fallback)
    ratio = sum(len(lz4(raw)) for raw in data[:50]) / sum(len(raw) for raw in data[:50])
    return {
        "always_us": always / BATCHES * 1e6,
        "fallback_us": fallback / BATCHES * 1e6,
        "compressed_share": sum(1 for w in sent if w == wire) / BATCHES,
        "ratio": ratio,
        "batch_bytes": len(data[0]),
    }


def main() -> None:
    print(
        f"LZ4 per batch, best of {ROUNDS} runs of {BATCHES:,} batches of 1 KB values; "
        "fallback: the daemon's CompressionTries"
    )
    print(
        f"{'values':<8}{'batch':>9}{'LZ4 size':>10}{'LZ4 always':>14}{'with fallback':>15}"
        f"{'sent compressed':>17}"
    )
    for kind in ("random", "json"):
        for batch_bytes in (8 * 1024, 128 * 1024):
            m = measure(kind, batch_bytes)
            print(
                f"{kind:<8}{m['batch_bytes']:>9,}{m['ratio']:>10.0%}"
                f"{m['always_us']:>11.1f} µs{m['fallback_us']:>12.1f} µs"
                f"{m['compressed_share']:>17.1%}",
                flush=True,
            )


if __name__ == "__main__":
    main()
