"""Processes the benchmark drives: a pulsar-lite broker, the daemon, and the worker sides.

Everything here is synchronous and polls conditions against deadlines; CPU and
memory figures come straight from ``/proc`` (no psutil).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tests.support import processes
from tests.support.processes import (
    ROOT,
    SOURCE_ROOTS,
    Broker,
    Counters,
    ProcessError,
    source_env,
    wait_for,
)

__all__ = ["ROOT", "Broker", "Counters", "Daemon", "Worker", "wait_for"]

BENCH = Path(__file__).resolve().parent
QLEN_PATH = Path("/proc/sys/net/unix/max_dgram_qlen")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


#: A process failed or a condition was not met in time.
BenchError = ProcessError


#: Where child processes import ``pulsar_bruce`` and ``to_pulsar`` from (see snapshot_sources).
_source_roots: list[Path] = list(SOURCE_ROOTS)


def snapshot_sources(dest: Path) -> str:
    """Copy the checkout's ``daemon/`` and ``client_lib/`` to ``dest`` and run them from there.

    Every daemon and sender of one run then executes the same code, even if the
    working tree is edited while the bench runs. Returns a description of that code.
    """
    import shutil

    roots = []
    for name in ("daemon", "client_lib"):
        shutil.copytree(
            ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
        roots.append(dest / name)
    _source_roots[:] = roots
    return describe_revision()


def describe_revision() -> str:
    """``git HEAD abc1234`` plus how many files under daemon/ and client_lib/ differ from it."""

    def git(*args: str) -> str:
        try:
            done = subprocess.run(
                ["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    changed = git("status", "--porcelain", "--", "daemon", "client_lib").splitlines()
    if not changed:
        return f"git HEAD {head}, no local changes under daemon/ client_lib/"
    return f"git HEAD {head} + {len(changed)} changed/new file(s) under daemon/ client_lib/"


# -- /proc -------------------------------------------------------------------------------------


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


# -- daemon ------------------------------------------------------------------------------------


class Daemon(processes.Daemon):
    """The shared daemon process, quieter, run from the snapshot, with its scrapes counted."""

    def __init__(self, workdir: Path, service_url: str, extra_args: list[str]):
        super().__init__(
            workdir,
            service_url,
            ["--log-level", "warning", *extra_args],
            source_roots=_source_roots,
            cwd=workdir,
        )
        self.scrapes = 0

    def counters(self) -> Counters:
        self.scrapes += 1
        return super().counters()

    scrape = counters


# -- worker subprocesses -----------------------------------------------------------------------


class Worker:
    """One side of a measurement in its own process (``bench/workers.py``).

    Protocol on its pipes: it prints ``READY`` once set up, waits for ``GO`` on
    stdin, does its work and prints ``RESULT <json>``.
    """

    def __init__(self, mode: str, params: dict[str, Any], log_path: Path):
        self.mode = mode
        self.log_path = log_path
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(BENCH / "workers.py"), mode, json.dumps(params)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=source_env(_source_roots),
                text=True,
            )
        line = self._read_line(60)
        if line != "READY":
            raise BenchError(f"{mode} worker did not get ready (said {line!r}); {self._tail()}")

    @property
    def pid(self) -> int:
        return self.process.pid

    def _stdout(self) -> IO[str]:
        assert self.process.stdout is not None
        return self.process.stdout

    def _read_line(self, timeout: float) -> str:
        import selectors

        with selectors.DefaultSelector() as selector:
            selector.register(self._stdout(), selectors.EVENT_READ)
            if not selector.select(timeout):
                raise BenchError(f"{self.mode} worker silent for {timeout:.0f} s; {self._tail()}")
        return self._stdout().readline().strip()

    def _tail(self) -> str:
        return "log: " + self.log_path.read_text(errors="replace")[-1500:]

    def go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("GO\n")
        self.process.stdin.flush()

    def result(self, timeout: float) -> dict[str, Any]:
        line = self._read_line(timeout)
        if not line.startswith("RESULT "):
            raise BenchError(f"{self.mode} worker failed (said {line!r}); {self._tail()}")
        self.process.wait(30)
        result: dict[str, Any] = json.loads(line[len("RESULT ") :])
        return result

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
