"""Processes the benchmark drives: a pulsar-lite broker, the daemon, and the worker sides.

Everything here is synchronous and polls conditions against deadlines; CPU and
memory figures come straight from ``/proc`` (no psutil; ``bench/machine.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any, NoReturn

from to_pulsar import Sender

from bench.machine import MachineCpu, machine_description, max_dgram_qlen
from bench.workers import STAMP
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

__all__ = ["ROOT", "BenchBase", "Broker", "Counters", "Daemon", "Worker", "wait_for"]

BENCH = Path(__file__).resolve().parent
#: How often the daemon's /metrics is polled while waiting for acks.
POLL_S = 0.005


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

    def counters(self, cheap: bool = False) -> Counters:
        self.scrapes += 1
        return super().counters(cheap)

    scrape = counters

    def poll_settled(self, target: int, timeout: float, what: str) -> tuple[float, int]:
        """Scrape every ``POLL_S`` until ``settled`` (acked + discarded) reaches ``target``.

        Returns when it did (``time.monotonic()``) and in how many scrapes the accounting
        identity (received = acked + discarded + buffered) did not hold.
        """
        deadline = time.monotonic() + timeout
        broken = 0
        while True:
            counters = self.scrape(cheap=True)  # the counters only: a cheap scrape
            broken += not counters.identity_holds()
            if counters.settled >= target:
                return time.monotonic(), broken
            if time.monotonic() > deadline:
                raise BenchError(f"{what}: only {counters} after the deadline")
            self.check_alive()
            time.sleep(POLL_S)


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


# -- what every bench run shares -------------------------------------------------------------


class BenchBase:
    """A run's worker processes (each killed on the way out), their logs, its losses, and
    the daemon-side checks."""

    def __init__(self, args: argparse.Namespace, workdir: Path):
        self.args = args
        self.workdir = workdir
        self.failures: list[str] = []
        self.run_id = f"{os.getpid()}-{int(time.time())}"
        self._counter = 0
        self.workers: list[Worker] = []

    def path(self, name: str) -> Path:
        self._counter += 1
        return self.workdir / f"{self._counter:03d}-{name}.log"

    def worker(self, mode: str, params: dict[str, Any], name: str) -> Worker:
        started = Worker(mode, params, self.path(name))
        self.workers.append(started)
        return started

    def start_workers(self, mode: str, params: list[dict[str, Any]], name: str) -> list[Worker]:
        """One worker per params, started side by side (each waits for READY)."""
        paths = [self.path(f"{name}-{i}") for i in range(len(params))]
        with ThreadPoolExecutor(8) as pool:
            started = list(pool.map(Worker, [mode] * len(params), params, paths))
        self.workers.extend(started)
        return started

    def run_paced_loops(self, row: dict[str, Any], payload: str, pool: int) -> dict[str, Any]:
        """``row``'s K paced loops making the same values and sending nothing
        (``workers.py`` mode ``pace``): the share of the senders' CPU that is the
        application's own loop (its wake-ups), not the sending."""
        k, per = row["senders"], row["per_sender"]
        params = {"messages": per, "size": row["size"], "rate": row["rate"]}
        params.update(payload=payload, pool=pool)
        loops = self.start_workers("pace", [{**params, "seed": i} for i in range(k)], "pace")
        for worker in loops:
            worker.go()
        results = [w.result(timeout=self.args.seconds * 3 + 60) for w in loops]
        cpu_s = sum(r["cpu_s"] for r in results)
        return {
            "senders_cpu_s": cpu_s,
            "us_per_msg": cpu_s / (k * per) * 1e6,
            "peak_rss_mb": sum(r["peak_rss_kib"] for r in results) / 1024,
        }

    def kill_workers(self) -> None:
        for worker in self.workers:
            worker.kill()

    def fail(self, what: str) -> None:
        self.failures.append(what)
        print(f"  LOSS: {what}", flush=True)

    def warm_topic(self, daemon: Daemon, topic: str, keyed: bool, partitions: int) -> None:
        """Make the daemon look up the topic and create its producers before timing.

        Sends ``4 * partitions`` messages whose stamp is sequence -1 (sender 0), which
        consumers of the topic skip."""
        before = daemon.scrape()
        count = max(partitions, 1) * 4
        pad = b"w" * 84
        with Sender(daemon.socket_path) as sender:
            for i in range(count):
                value = STAMP.pack(0, -1) + pad
                sender.send(topic, value, partition_key=i if keyed else None)
        after = daemon.wait_settled(before.received + count, 60)
        if after.acked - before.acked != count:
            raise BenchError(f"warm-up of {topic} not acked: {after}")

    def check_daemon_run(self, what: str, base: Counters, end: Counters, sent: int) -> bool:
        """Every datagram sent was received and acked, none discarded (else a loss)."""
        received = end.received - base.received
        acked = end.acked - base.acked
        discarded = {
            reason: count - base.discarded.get(reason, 0)
            for reason, count in end.discarded.items()
            if count != base.discarded.get(reason, 0)
        }
        if received == sent and acked == sent and not discarded:
            return True
        self.fail(
            f"{what}: sent {sent}, received {received}, acked {acked}, discarded {discarded}, "
            f"unaccounted {sent - acked - sum(discarded.values())}"
        )
        return False


def add_run_args(parser: argparse.ArgumentParser) -> None:
    """--set-qlen, --json and --workdir, as every bench takes them."""
    parser.add_argument(
        "--set-qlen",
        type=int,
        metavar="N",
        help="as root: write N to /proc/sys/net/unix/max_dgram_qlen for the run",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write results as JSON")
    parser.add_argument("--workdir", type=Path, help="keep brokers' data and logs here")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def open_run(stack: contextlib.ExitStack, args: argparse.Namespace) -> tuple[Path, dict[str, Any]]:
    """Start a run inside ``stack``: SIGTERM unwinds like Ctrl-C (so children are stopped
    and the qlen restored), --set-qlen applied, the work dir (--workdir, or a temp dir),
    and the machine's description with the code snapshotted into the work dir."""
    signal.signal(signal.SIGTERM, _interrupt)
    stack.enter_context(max_dgram_qlen(args.set_qlen))
    if args.workdir:
        workdir: Path = args.workdir
        workdir.mkdir(parents=True, exist_ok=True)
    else:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-")))
    machine = machine_description()
    machine["code"] = snapshot_sources(workdir / "src")
    return workdir, machine


def print_machine(title: str, machine: dict[str, Any], qlen_set: bool) -> None:
    """The head of a report: what ran where."""
    versions = ", ".join(f"{k} {v}" for k, v in machine["versions"].items())
    print(title)
    print(
        f"machine: {machine['cpu_model']}, {machine['cores']} cores "
        f"({machine['cores_usable']} usable), {machine['memory_gib']} GiB"
    )
    print(f"kernel: {machine['kernel']}; Python {machine['python']}; {versions}")
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"code: {machine['code']} (copied at start; every process of the run uses the copy)")
    print(
        f"net.unix.max_dgram_qlen = {machine['max_dgram_qlen']}"
        + (
            ""
            if qlen_set
            else "  (datagram senders block once this many are queued; see --set-qlen)"
        )
    )


def close_results(
    results: dict[str, Any],
    machine: dict[str, Any],
    started: float,
    cpu_before: MachineCpu,
    failures: list[str],
) -> None:
    """A run's closing figures: the machine, the wall time since ``started``
    (``time.monotonic()``), what other processes used meanwhile, and the losses."""
    results["machine"] = machine
    results["wall_s"] = time.monotonic() - started
    results.update(MachineCpu.now().since(cpu_before))
    results["lost"] = failures


def write_json(path: Path | None, results: dict[str, Any]) -> None:
    """``--json``: the results so far (rewritten as a run goes on, in case it is cut short)."""
    if path is not None:
        path.write_text(json.dumps(results, indent=2, default=str) + "\n")


def print_footer(results: dict[str, Any], all_well: str) -> None:
    """The end of a report: wall time, what else ran meanwhile, and any losses (else
    ``all_well``)."""
    wall = results["wall_s"]
    print(
        f"wall time {wall:.0f} s; meanwhile other processes on the machine used "
        f"{results['other_cpu_s']:.1f} CPU-s ({results['other_cpu_s'] / wall:.0%} of one core) "
        f"and the hypervisor stole {results['steal_s']:.1f} s"
    )
    if results["lost"]:
        print(f"FAILED: {len(results['lost'])} problem(s):")
        for what in results["lost"]:
            print(f"  {what}")
    else:
        print(all_well)


def cli(main: Callable[[], int]) -> NoReturn:
    """Run a bench's ``main``: exit with its code, 2 if the bench itself failed, 130 on Ctrl-C."""
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
