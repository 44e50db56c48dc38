"""Processes the benchmark drives: a pulsar-lite broker, the daemon, and the worker sides.

Everything here is synchronous and polls conditions against deadlines; CPU and
memory figures come straight from ``/proc`` (no psutil).
"""

from __future__ import annotations

import json
import os
import platform
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
QLEN_PATH = Path("/proc/sys/net/unix/max_dgram_qlen")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

T = TypeVar("T")


class BenchError(Exception):
    """A process failed or a condition was not met in time."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def wait_for(condition: Callable[[], T | None], timeout: float, what: str) -> T:
    """Poll ``condition`` (5 ms doubling to 100 ms) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    interval = 0.005
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
        interval = min(interval * 2, 0.1)


#: Where child processes import ``pulsar_bruce`` and ``to_pulsar`` from (see snapshot_sources).
_source_roots: list[Path] = [ROOT / "daemon", ROOT / "client_lib"]


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


def source_env() -> dict[str, str]:
    """The environment for child processes: the source roots first on PYTHONPATH.

    Prepending them means the checkout is what gets measured, whether or not (and
    however) the package is installed in the running interpreter's environment.
    """
    env = dict(os.environ)
    roots = [str(root) for root in _source_roots]
    if env.get("PYTHONPATH"):
        roots.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(roots)
    return env


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


# -- broker ------------------------------------------------------------------------------------


class Broker:
    """One pulsar-lite process on a free port with its own data dir; restartable on that port."""

    def __init__(self, workdir: Path, partitions: int):
        from pulsar_lite.binary_finder import find_pulsar_lite_binary

        self.binary = str(find_pulsar_lite_binary())
        self.workdir = workdir
        self.partitions = partitions
        self.port = free_port()
        self.url = f"pulsar://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "pulsar-lite.toml").write_text(
            f"default_partitions = {partitions}\n\n[metrics]\nenabled = false\n"
        )

    @property
    def pid(self) -> int:
        if self.process is None:
            raise BenchError("broker is not running")
        return self.process.pid

    def start(self) -> None:
        with (self.workdir / "broker.log").open("ab") as log:
            self.process = subprocess.Popen(
                [
                    self.binary,
                    "--config",
                    str(self.workdir / "pulsar-lite.toml"),
                    "--addr",
                    f"127.0.0.1:{self.port}",
                    "--db-path",
                    str(self.workdir / "data"),
                    "--log-level",
                    "warn",
                ],
                cwd=self.workdir,
                stdout=log,
                stderr=log,
            )
        wait_for(self._listening, 30, "the broker to listen")

    def _listening(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise BenchError(f"broker exited with {self.process.returncode}; see {self.workdir}")
        return port_open(self.port)

    def kill(self) -> None:
        """SIGKILL: the broker vanishes without closing anything."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
            self.process = None


# -- daemon ------------------------------------------------------------------------------------


@dataclass
class Counters:
    """One scrape of the daemon's accounting counters (and the latency histogram)."""

    received: int = 0
    acked: int = 0
    buffered: int = 0
    possible_duplicates: int = 0
    discarded: dict[str, int] = field(default_factory=dict)
    #: ``pulsar_bruce_send_latency_seconds`` cumulative buckets: upper bound -> count.
    latency_buckets: dict[float, int] = field(default_factory=dict)

    @property
    def total_discarded(self) -> int:
        return sum(self.discarded.values())

    @property
    def settled(self) -> int:
        """Messages with an outcome: acked or discarded."""
        return self.acked + self.total_discarded


_DISCARDED = re.compile(r'^pulsar_bruce_discarded_total\{reason="([a-z_]+)"\} (\S+)$')
_LATENCY_BUCKET = re.compile(r'^pulsar_bruce_send_latency_seconds_bucket\{le="([^"]+)"\} (\S+)$')
_SIMPLE = {
    "pulsar_bruce_received_total": "received",
    "pulsar_bruce_acked_total": "acked",
    "pulsar_bruce_buffered_messages": "buffered",
    "pulsar_bruce_possible_duplicates_total": "possible_duplicates",
}


def parse_counters(text: str) -> Counters:
    counters = Counters()
    for line in text.splitlines():
        if not line.startswith("pulsar_bruce_"):
            continue
        name, _, value = line.partition(" ")
        attribute = _SIMPLE.get(name)
        if attribute is not None:
            setattr(counters, attribute, int(float(value)))
        elif match := _DISCARDED.match(line):
            counters.discarded[match.group(1)] = int(float(match.group(2)))
        elif match := _LATENCY_BUCKET.match(line):
            counters.latency_buckets[float(match.group(1))] = int(float(match.group(2)))
    return counters


class Daemon:
    """``python -m pulsar_bruce`` as a subprocess; counters read from its /metrics."""

    def __init__(self, workdir: Path, service_url: str, extra_args: list[str]):
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.socket_path = str(workdir / "bruce.sock")
        self.metrics_port = free_port()
        self.log_path = workdir / "daemon.log"
        self.argv = [
            sys.executable,
            "-m",
            "pulsar_bruce",
            "--socket",
            self.socket_path,
            "--service-url",
            service_url,
            "--metrics-listen",
            f"127.0.0.1:{self.metrics_port}",
            "--log-level",
            "warning",
            *extra_args,
        ]
        self.scrapes = 0
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv, stdout=log, stderr=log, env=source_env(), cwd=workdir
            )
        wait_for(self._serving, 30, "the daemon to serve")

    @property
    def pid(self) -> int:
        return self.process.pid

    def _serving(self) -> bool:
        self.check_alive()
        return os.path.exists(self.socket_path) and port_open(self.metrics_port)

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-2000:]
            raise BenchError(f"daemon exited with {self.process.returncode}:\n{tail}")

    def scrape(self) -> Counters:
        """One GET /metrics over a raw socket (cheaper than urllib at a 5 ms poll)."""
        self.scrapes += 1
        with socket.create_connection(("127.0.0.1", self.metrics_port), timeout=10) as conn:
            conn.sendall(b"GET /metrics HTTP/1.0\r\nHost: bench\r\n\r\n")
            chunks = []
            while chunk := conn.recv(65536):
                chunks.append(chunk)
        response = b"".join(chunks).decode("latin-1")
        head, _, body = response.partition("\r\n\r\n")
        if not head.startswith("HTTP/1.1 200"):
            raise BenchError(f"unexpected /metrics response: {head[:200]!r}")
        return parse_counters(body)

    def wait_settled(self, expected_received: int, timeout: float) -> Counters:
        """Until every datagram counted so far has an outcome (buffered == 0)."""

        last = Counters()

        def settled() -> Counters | None:
            nonlocal last
            self.check_alive()
            last = self.scrape()
            return last if last.received >= expected_received and last.buffered == 0 else None

        try:
            return wait_for(settled, timeout, f"{expected_received} datagrams to settle")
        except BenchError as exc:
            tail = self.log_path.read_text(errors="replace")[-2000:]
            raise BenchError(f"{exc}; last scrape {last}; daemon log tail:\n{tail}") from exc

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


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
                env=source_env(),
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
