"""Clocks are passed in: no module of ``producer/``, ``spool/``, ``service/`` or ``topics/``
reads one itself (``time.monotonic`` and the like appear only as a parameter's default, the
clock the edge gives when it gives none), so tests drive every timeout, tick and stamp."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "daemon" / "pulsar_bruce"
PARTS = ("producer", "spool", "service", "topics")
CLOCKS = {"time", "monotonic", "time_ns", "monotonic_ns", "perf_counter", "perf_counter_ns"}


def clock_reads(source: str) -> list[str]:
    """``time.<clock>()`` calls (a bare ``time.monotonic`` as a default is not a read)."""
    return [
        f"{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in CLOCKS
        and ast.unparse(node.func.value) in ("time", "datetime.datetime", "datetime")
    ]


def test_no_core_or_edge_module_reads_a_clock_itself() -> None:
    found = {
        path.relative_to(PACKAGE).as_posix(): reads
        for part in PARTS
        for path in sorted((PACKAGE / part).rglob("*.py"))
        if (reads := clock_reads(path.read_text()))
    }
    assert not found, f"take a clock parameter instead: {found}"


def test_the_check_sees_what_it_looks_for() -> None:
    source = "def f(clock=time.monotonic):\n    return clock() + time.monotonic()\n"
    assert clock_reads(source) == ["2: time.monotonic()"]
    assert clock_reads("x = time.time_ns() // 1_000_000\n") == ["1: time.time_ns()"]
