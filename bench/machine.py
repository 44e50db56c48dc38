"""The machine a bench runs on, read straight from ``/proc`` (no psutil): CPU seconds and
memory of a process, the machine's CPU meanwhile, the kernel's datagram queue length, and
what the run ran on (CPU, kernel, Python, package versions).
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

QLEN_PATH = Path("/proc/sys/net/unix/max_dgram_qlen")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of ``pid`` so far, in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # The command name (field 2) may contain spaces; everything after ")" is fixed-format.
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / CLOCK_TICKS


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of ``pid`` in KiB."""
    result = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            result[name] = int(value.split()[0])
    return result


@dataclass
class MachineCpu:
    """Machine-wide CPU seconds so far (/proc/stat) and this process's own plus its children's."""

    busy: float
    steal: float
    own: float

    @classmethod
    def now(cls) -> MachineCpu:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
        user, nice, system, _idle, _iowait, irq, softirq, steal = fields
        times = os.times()
        own = times.user + times.system + times.children_user + times.children_system
        return cls((user + nice + system + irq + softirq) / CLOCK_TICKS, steal / CLOCK_TICKS, own)

    def since(self, earlier: MachineCpu) -> dict[str, float]:
        """CPU seconds used meanwhile by processes outside this run (waited-for children count
        as ours), and stolen by the hypervisor."""
        busy = self.busy - earlier.busy
        own = self.own - earlier.own
        return {"other_cpu_s": max(0.0, busy - own), "steal_s": self.steal - earlier.steal}


def read_qlen() -> int:
    return int(QLEN_PATH.read_text())


@contextlib.contextmanager
def max_dgram_qlen(value: int | None) -> Iterator[None]:
    """Set net.unix.max_dgram_qlen for the run (root only) and restore it afterwards."""
    if value is None:
        yield
        return
    if os.geteuid() != 0:
        raise SystemExit("--set-qlen needs root (it writes /proc/sys/net/unix/max_dgram_qlen)")
    old = read_qlen()
    QLEN_PATH.write_text(f"{value}\n")
    print(
        f"note: net.unix.max_dgram_qlen set to {value} for this run (was {old}); "
        f"it applies to sockets created from now on and is restored to {old} on exit",
        flush=True,
    )
    try:
        yield
    finally:
        QLEN_PATH.write_text(f"{old}\n")


def machine_description() -> dict[str, Any]:
    model = "unknown"
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    return {
        "cpu_model": model,
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "kernel": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "max_dgram_qlen": read_qlen(),
        "versions": _package_versions(),
    }


def _package_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("pulsar-client", "pulsar-lite", "uvloop", "lz4"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found
