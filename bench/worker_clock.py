"""A worker process's own clocks (``bench/workers.py``): its peak RSS, and its thread's time on
a CPU, waiting for one, and blocked, from ``/proc`` (stdlib only: it runs as a script too)."""

from __future__ import annotations

import contextlib
import time


def peak_rss_kib() -> int:
    """This process's peak resident set so far (VmHWM)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def thread_clock() -> tuple[float, float, float, int]:
    """This thread so far: wall clock, seconds on a CPU, seconds waiting for one (run
    queue), and voluntary context switches (each time it slept, e.g. in a full send).

    From /proc/thread-self/schedstat and status; where schedstat reads zero (some
    sandboxes), on-CPU time is ``time.thread_time()`` and run-queue waits count as 0.
    """
    wall = time.monotonic()
    try:
        with open("/proc/thread-self/schedstat") as f:
            run_ns, wait_ns = (int(x) for x in f.read().split()[:2])
    except (OSError, ValueError):
        run_ns = wait_ns = 0
    switches = 0
    with contextlib.suppress(OSError), open("/proc/thread-self/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                switches = int(line.split()[1])
    on_cpu = run_ns / 1e9 if run_ns else time.thread_time()
    return wall, on_cpu, wait_ns / 1e9, switches


def blocked_since(before: tuple[float, float, float, int]) -> dict[str, float]:
    """Off-CPU time of this thread since ``before`` not spent waiting for a CPU: for a
    send loop, the time its sends were blocked; and how many times it went to sleep."""
    after = thread_clock()
    wall, on_cpu, runq = (after[i] - before[i] for i in range(3))
    return {
        "blocked_s": max(0.0, wall - on_cpu - runq),
        "runq_wait_s": runq,
        "sleeps": after[3] - before[3],
    }
