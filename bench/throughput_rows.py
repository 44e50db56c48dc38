"""The rows of ``bench/throughput.py``'s table: what each row sends (``RowSpec``, the list in
``row_specs``), what one timed run of a side measured (``SideRun``), a row's runs over the
rounds (``RowResult``) and their JSON."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class RowSpec:
    """One line of the throughput table: a message size and routing on a broker."""

    name: str
    size: int
    messages: int
    partitions: int
    keyed: bool
    stream: bool = False  # StreamSender on the stream socket, one flush at the end
    extras: bool = False  # also the official client with a callback, and the kernel ceiling
    journal: bool = False  # into a daemon with --spool-dir: its write-ahead journal on
    payload: str = "random"  # bench.payloads.KINDS: random bytes or JSON-like records


@dataclass
class SideRun:
    """One timed run of one side."""

    rate: float
    seconds: float
    ok: bool
    client_cpu_us: float  # (a): official client process; (b): sender process
    broker_cpu_us: float
    #: (b): the daemon; kernel ceiling: the receiving process (the daemon's floor).
    daemon_cpu_us: float | None = None
    scrapes: int | None = None

    @classmethod
    def of(
        cls,
        n: int,
        seconds: float,
        ok: bool,
        client_cpu_s: float,
        broker_cpu_s: float,
        daemon_cpu_s: float | None = None,
        scrapes: int | None = None,
    ) -> SideRun:
        """``n`` messages in ``seconds``, the CPU seconds each part spent: per message."""

        def per_message(cpu_s: float) -> float:
            return cpu_s / n * 1e6

        daemon = None if daemon_cpu_s is None else per_message(daemon_cpu_s)
        return cls(
            n / seconds, seconds, ok, per_message(client_cpu_s), per_message(broker_cpu_s),
            daemon, scrapes,
        )  # fmt: skip


@dataclass
class RowResult:
    spec: RowSpec
    official: list[SideRun] = field(default_factory=list)  # no callback: the headline
    daemon: list[SideRun] = field(default_factory=list)
    official_callback: list[SideRun] = field(default_factory=list)
    ceiling: list[SideRun] = field(default_factory=list)

    def ratios(self) -> list[float]:
        return [b.rate / a.rate for a, b in zip(self.official, self.daemon, strict=True)]


def row_specs(n: int) -> list[RowSpec]:
    return [
        RowSpec("100 B", 100, n, 1, False, extras=True),
        RowSpec("100 B journal", 100, n, 1, False, journal=True),
        RowSpec("1 KB", 1000, max(100, n // 3), 1, False),
        RowSpec("1 KB json", 1000, max(100, n // 3), 1, False, payload="json"),
        RowSpec("10 KB", 10_000, max(100, n // 10), 1, False),
        RowSpec("10 KB json", 10_000, max(100, n // 10), 1, False, payload="json"),
        RowSpec("100 B 4-part key", 100, n, 4, True),
        RowSpec("100 B stream", 100, n, 1, False, stream=True),
    ]


def row_json(row: RowResult) -> dict[str, Any]:
    return {
        "spec": asdict(row.spec),
        "official": [asdict(run) for run in row.official],
        "daemon": [asdict(run) for run in row.daemon],
        "official_callback": [asdict(run) for run in row.official_callback],
        "kernel_ceiling": [asdict(run) for run in row.ceiling],
        "median_ratio": statistics.median(row.ratios()),
    }
