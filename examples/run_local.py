"""`make run`: pulsar-lite on 127.0.0.1:6650 (data in ./data) plus the daemon in the foreground.

`make run PULSAR=apache` (``--broker apache``): Apache Pulsar standalone instead, the
Java broker of tests/support/apache_pulsar.py (Java 17; its classpath resolved by
Maven once), on 127.0.0.1:6650 with its admin API on 8080 (or a free port if 8080
is taken; --web-port) and its data in ./data/apache-pulsar.

The daemon's socket is ./run/bruce.sock (its stream socket ./run/bruce.stream.sock)
and its metrics are on 127.0.0.1:9090. Ctrl-C (SIGINT), SIGTERM and SIGHUP stop
the daemon (which delivers what it buffered) and then the broker; a second one
stops the daemon at once, or the broker if only it is left. Should this process
die without doing so, the kernel sends both SIGTERM (Linux). If the broker exits
while the daemon runs, it says so in one line (which, how, where its log is),
stops the daemon and exits 1. If a port is taken it starts nothing and says, in
one line, what holds it.

`make run PULSAR=cluster` (``--broker cluster``): a three-broker Apache Pulsar cluster
(ZooKeeper, a bookie, three PulsarBrokerStarter brokers; tests/support/apache_cluster.py)
with its brokers on 127.0.0.1:6650, 6651 and 6652 (admin APIs on 8080-8082, or free
ports if 8080 is taken) and the daemon given all three; its data, in
./data/apache-cluster, starts afresh each time.

Options (for tests and second copies): --broker lite|apache|cluster, --broker-port, --metrics-port,
--web-port (Apache Pulsar's admin API), --data DIR, --run DIR.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


# -- who holds a port ----------------------------------------------------------------------------


def port_taken(port: int) -> bool:
    """True if 127.0.0.1:port cannot be bound (something listens there, or on all addresses)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is not "taken"
        try:
            sock.bind((HOST, port))
        except OSError as exc:
            return exc.errno in (errno.EADDRINUSE, errno.EACCES)
    return False


def accepts(port: int) -> bool:
    """True once something accepts connections on 127.0.0.1:port (a probe that binds
    nothing, so it cannot get in the way of the child binding it)."""
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def _listening_sockets(port: int) -> dict[str, int]:
    """``{"socket:[inode]": uid}`` of the TCP sockets listening on ``port`` (Linux /proc)."""
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            local, state, uid, inode = fields[1], fields[3], fields[7], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                found[f"socket:[{inode}]"] = int(uid)
    return found


def port_holder(port: int) -> tuple[int | None, str]:
    """(pid, description) of what listens on ``port``: ``pid 42 (pulsar-lite --addr ...)``."""
    sockets = _listening_sockets(port)
    if not sockets:
        return None, "something"
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in sockets for fd in (proc / "fd").iterdir()):
                command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
                if len(command) > 100:
                    command = command[:97] + "..."
                return int(proc.name), f"pid {proc.name} ({command})"
        except OSError:  # gone, or not ours to look at
            continue
    uid = next(iter(sockets.values()))
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    return None, f"a process of user {user}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def free_ports_in_a_row(count: int) -> int:
    """The first of ``count`` consecutive free ports, below the kernel's ephemeral range (a
    free port in it can be taken by any outgoing connection before a broker binds it)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    candidates = list(range(10000, max(low - count, 10001), count))
    random.shuffle(candidates)
    for first in candidates:
        if not any(port_taken(first + i) for i in range(count)):
            return first
    sys.exit(f"run_local: no {count} consecutive free ports below {low}")


def refuse_taken_ports(ports: dict[int, str]) -> None:
    """Exit with one line if any port is taken, naming what holds each."""
    taken = [
        f"port {port} ({role}) is taken by {port_holder(port)[1]}"
        for port, role in ports.items()
        if port_taken(port)
    ]
    if taken:
        sys.exit(f"run_local: not starting: {'; '.join(taken)}")


# -- children ------------------------------------------------------------------------------------


def _child_setup(parent: int) -> Callable[[], None]:
    """In the child before exec: take the stop signals again, and (Linux) get SIGTERM
    when this process dies, however it dies."""

    libc = ctypes.CDLL(None) if sys.platform == "linux" else None

    def setup() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        if libc is not None:
            libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
            if os.getppid() != parent:  # it died before prctl
                os.kill(os.getpid(), signal.SIGTERM)

    return setup


def start(command: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """Start a child with the stop signals blocked here, so a signal cannot arrive between
    the fork and our knowing the child's pid (it is delivered right after)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        return subprocess.Popen(command, preexec_fn=_child_setup(os.getpid()), **kwargs)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


class Stopped(Exception):
    """A stop signal arrived before the daemon was running."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def say(line: str) -> None:
    print(f"run_local: {line}", file=sys.stderr, flush=True)


def exit_status(returncode: int) -> str:
    """``-9`` -> ``killed by SIGKILL``, ``1`` -> ``exit code 1``."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


class Runner:
    """The broker and the daemon, watched while they run.

    Every stop signal goes on to the daemon while it runs: SIGINT as itself (so its log
    says what the user pressed), SIGTERM and SIGHUP as SIGTERM (SIGHUP would mean
    "reload" to it); the daemon takes a second one as "stop waiting for receipts".
    """

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.broker: subprocess.Popen[bytes] | None = None
        self.broker_name = "pulsar-lite"
        self.broker_log = ""
        self.daemon: subprocess.Popen[bytes] | None = None
        self.daemon_ready = False  # its signal handlers are in place
        self.stopping = False
        self.stopping_broker = False

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        first, self.stopping = not self.stopping, True
        daemon, broker = self.daemon, self.broker
        if daemon is None:
            if first:
                raise Stopped(signum)  # still starting: unwind, and `finally` stops the broker
        elif daemon.poll() is None:
            passed = signum if signum == signal.SIGINT and self.daemon_ready else signal.SIGTERM
            daemon.send_signal(passed)
            return
        if self.stopping_broker and broker is not None and broker.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # asked again: do not wait for it
                os.killpg(broker.pid, signal.SIGKILL)

    def watch(self) -> int:
        """Wait for the daemon; a broker that exits first is reported in one line, the
        daemon stopped, and the exit status is 1 (nothing would ever be delivered)."""
        daemon, broker = self.daemon, self.broker
        assert daemon is not None and broker is not None
        broker_died = False
        while daemon.poll() is None:
            if not broker_died and not self.stopping and broker.poll() is not None:
                broker_died = self.stopping = True
                status, log = exit_status(broker.returncode), self.broker_log
                say(f"{self.broker_name} exited ({status}); see {log}; stopping pulsar-bruce")
                daemon.send_signal(signal.SIGTERM)
            time.sleep(0.1)
        if broker_died:
            return 1
        if not self.stopping:  # it stopped on its own
            status = exit_status(daemon.returncode)
            say(f"pulsar-bruce exited ({status}); stopping {self.broker_name}")
            return daemon.returncode or 1
        return daemon.returncode

    def wait_until(self, ready: Callable[[], bool], child: subprocess.Popen[bytes], what: str,
                   log: str, timeout: float = 30) -> None:  # fmt: skip
        deadline = time.monotonic() + timeout
        while not ready():
            if child.poll() is not None:
                sys.exit(f"run_local: {what} exited ({child.returncode}); see {log}")
            if time.monotonic() > deadline:
                sys.exit(f"run_local: {what} did not start within {timeout:.0f} s; see {log}")
            time.sleep(0.1)

    def start_lite(self, data: Path) -> None:
        args = self.args
        config = data / "pulsar-lite.toml"
        config.write_text("default_partitions = 4\n\n[metrics]\nenabled = false\n")
        from pulsar_lite.binary_finder import find_pulsar_lite_binary

        self.broker_log = str(data / "broker.log")
        with (data / "broker.log").open("ab") as log:
            self.broker = start(
                [find_pulsar_lite_binary(), "--config", str(config),
                 "--addr", f"{HOST}:{args.broker_port}", "--db-path", str(data / "db")],
                stdout=log, stderr=log, start_new_session=True,
            )  # fmt: skip
        self.wait_until(
            lambda: accepts(args.broker_port), self.broker, "pulsar-lite", str(log.name)
        )

    def start_apache(self, data: Path) -> None:
        """Apache Pulsar standalone in a JVM of its own, started like pulsar-lite (the stop
        signals, PR_SET_PDEATHSIG, its own session); ready once its admin API lists
        public/default (the JVM takes 10-30 s)."""
        args = self.args
        sys.path.insert(0, str(ROOT))  # tests.support, from the checkout
        from tests.support.apache_pulsar import AdminError, ApachePulsar
        from tests.support.processes import ProcessError

        pulsar = ApachePulsar(data / "apache-pulsar", port=args.broker_port, web_port=args.web_port)
        try:
            command = pulsar.command()  # resolves the classpath (Maven, once) or says what lacks
        except ProcessError as exc:
            sys.exit(f"run_local: {exc}")

        def ready() -> bool:
            if not (accepts(args.broker_port) and accepts(args.web_port)):
                return False
            try:
                return "public/default" in pulsar.admin.get("/admin/v2/namespaces/public")
            except (OSError, AdminError):
                return False

        self.broker_name, self.broker_log = "Apache Pulsar", str(pulsar.log_path)
        with pulsar.log_path.open("ab") as log:
            self.broker = start(
                command, cwd=pulsar.workdir, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        self.wait_until(ready, self.broker, "Apache Pulsar", str(pulsar.log_path), timeout=180)

    def start_cluster(self, data: Path) -> None:
        """The three-broker cluster, run by ``tests.support.apache_cluster serve`` in a
        process of its own (its JVMs in its session: the stop signals reach them all)."""
        args = self.args
        workdir = data / "apache-cluster"
        shutil.rmtree(workdir, ignore_errors=True)  # ZooKeeper's and the bookie's ports are new
        workdir.mkdir(parents=True)
        sys.path.insert(0, str(ROOT))
        from tests.support.apache_pulsar import Admin, AdminError, classpath
        from tests.support.processes import ProcessError

        try:
            classpath()  # resolved by Maven once, or one line saying what lacks
        except ProcessError as exc:
            sys.exit(f"run_local: {exc}")
        admin = Admin(f"http://{HOST}:{args.web_port}")

        def ready() -> bool:
            ports = [args.broker_port + i for i in range(3)] + [args.web_port + i for i in range(3)]
            if not all(accepts(port) for port in ports):
                return False
            try:
                return "public/default" in admin.get("/admin/v2/namespaces/public")
            except (OSError, AdminError):
                return False

        self.broker_name, self.broker_log = "the Apache Pulsar cluster", str(workdir / "serve.log")
        with (workdir / "serve.log").open("ab") as log:
            self.broker = start(
                [sys.executable, "-m", "tests.support.apache_cluster", "serve", str(workdir),
                 str(args.broker_port), str(args.web_port)],
                cwd=ROOT, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        self.wait_until(ready, self.broker, "the cluster", self.broker_log, timeout=300)

    def run(self) -> int:
        args = self.args
        data, run = Path(args.data), Path(args.run)
        data.mkdir(parents=True, exist_ok=True)
        run.mkdir(parents=True, exist_ok=True)
        if args.broker == "apache":
            self.start_apache(data)
        elif args.broker == "cluster":
            self.start_cluster(data)
        else:
            self.start_lite(data)
        sock = run / "bruce.sock"
        self.daemon = start(
            [sys.executable, "-m", "pulsar_bruce", "--socket", str(sock),
             "--service-url", service_url(args),
             "--metrics-listen", f"{HOST}:{args.metrics_port}"],
            start_new_session=True,  # signals reach it from us only: SIGHUP would mean reload
        )  # fmt: skip
        self.wait_until(
            lambda: sock.exists() and accepts(args.metrics_port),
            self.daemon,
            "pulsar-bruce",
            "its log above",
        )
        self.daemon_ready = True
        print(hint(args, sock), flush=True)
        return self.watch()

    def stop(self) -> None:
        """The daemon first (it delivers what it holds), then the broker."""
        self.stopping = True  # from here on a signal goes to the daemon, or kills the broker
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            self.daemon.wait()
        if self.broker is not None and self.broker.poll() is None:
            self.stopping_broker = True  # a further signal kills it
            os.killpg(self.broker.pid, signal.SIGTERM)
            os.killpg(self.broker.pid, signal.SIGCONT)  # stopped (Ctrl-Z, SIGSTOP): wake it up
            try:  # the JVM closes its broker, bookie and metadata store: give it longer
                self.broker.wait(10 if self.args.broker == "lite" else 60)
            except subprocess.TimeoutExpired:
                os.killpg(self.broker.pid, signal.SIGKILL)
                self.broker.wait(10)


def service_url(args: argparse.Namespace) -> str:
    """The broker's URL; the cluster's names its three brokers."""
    if args.broker == "cluster":
        return "pulsar://" + ",".join(f"{HOST}:{args.broker_port + i}" for i in range(3))
    return f"pulsar://{HOST}:{args.broker_port}"


def hint(args: argparse.Namespace, sock: Path) -> str:
    python = sys.executable
    bin_dir = Path(python).parent
    url = service_url(args)
    read_url = "" if url == f"pulsar://{HOST}:6650" else f" --service-url {url}"
    admin = ""
    if args.broker == "cluster":
        admins = ", ".join(f"http://{HOST}:{args.web_port + i}" for i in range(3))
        broker = (
            f"A three-broker Apache Pulsar cluster is listening on {url} (admin {admins}; "
            f"data in {Path(args.data) / 'apache-cluster'}, new each start)."
        )
        admin = f"\n  admin:    curl -s http://{HOST}:{args.web_port}/admin/v2/brokers/bruce-cluster"
    elif args.broker == "apache":
        broker = (
            f"Apache Pulsar standalone is listening on {url} (admin http://{HOST}:"
            f"{args.web_port}; data in {Path(args.data) / 'apache-pulsar'})."
        )
        # Tenants, namespaces, policies: docs/deploying.md#tenants-and-namespaces.
        admin = f"\n  admin:    curl -s http://{HOST}:{args.web_port}/admin/v2/tenants"
    else:
        broker = f"pulsar-lite is listening on {url} (data in {args.data})."
    return f"""
{broker}
pulsar-bruce: socket {sock}, metrics http://{HOST}:{args.metrics_port}/metrics

In another terminal:
  send:     {bin_dir}/to_pulsar --socket-path {sock} --topic demo --value hello --key k1
  observe:  curl -s {HOST}:{args.metrics_port}/metrics | grep -E '^pulsar_bruce_(received|acked)'
  read:     {python} {ROOT / "examples" / "read_back.py"} --topic demo{read_url}{admin}
Ctrl-C stops it."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="run_local.py", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--broker",
        choices=("lite", "apache", "cluster"),
        default="lite",
        help="pulsar-lite (default), Apache Pulsar standalone or a three-broker Apache Pulsar "
        "cluster (Java 17, Maven)",
    )
    parser.add_argument("--broker-port", type=int, default=6650)
    parser.add_argument(
        "--web-port",
        type=int,
        help="Apache Pulsar's admin API [8080, or a free port if 8080 is taken]",
    )
    parser.add_argument("--metrics-port", type=int, default=9090)
    parser.add_argument("--data", default=str(ROOT / "data"), help="broker data [./data]")
    parser.add_argument("--run", default=str(ROOT / "run"), help="daemon sockets [./run]")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ports = {args.broker_port: "the broker", args.metrics_port: "metrics"}
    if args.broker == "apache":
        if args.web_port is None:
            args.web_port = 8080 if not port_taken(8080) else free_port()
        ports[args.web_port] = "Apache Pulsar's admin API"
    elif args.broker == "cluster":
        if args.web_port is None:
            free = not any(port_taken(8080 + i) for i in range(3))
            args.web_port = 8080 if free else free_ports_in_a_row(3)
        for i in range(3):
            ports[args.broker_port + i] = f"broker {i + 1} of the cluster"
            ports[args.web_port + i] = f"broker {i + 1}'s admin API"
    refuse_taken_ports(ports)
    runner = Runner(args)
    for signum in STOP_SIGNALS:
        signal.signal(signum, runner.on_signal)
    try:
        return runner.run()
    except Stopped as stopped:
        return 128 + stopped.signum
    finally:
        runner.stop()


if __name__ == "__main__":
    sys.exit(main())
