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
--web-port (Apache Pulsar's admin API), --data DIR, --run DIR; `make run BROKER_PORT=6660
METRICS_PORT=9091` passes the ports (a copy on another broker port keeps its data and sockets
in ./data-PORT and ./run-PORT), RUN_ARGS="..." anything else.

`run_local.py broker stop` and `broker start` (make broker-stop, make broker-start; with the
copy's BROKER_PORT, or --run) stop the running copy's broker, and start it again on the same
port and data, to watch the daemon ride an outage out; each returns once it is done.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # run_local_* beside it, also when loaded by path
    sys.path.insert(0, str(HERE))
from run_local_children import STOP_SIGNALS, exit_status, start, wait_until  # noqa: E402
from run_local_control import (  # noqa: E402
    BROKER_SWITCH,
    STATE,
    default_dirs,
    hint,
    make_command,
    service_url,
    switch_broker,
)
from run_local_ports import (  # noqa: E402
    HOST,
    accepts,
    free_port,
    free_ports_in_a_row,
    port_holder,
    port_taken,
    refuse_taken_ports,
)

ROOT = HERE.parent
__all__ = ["accepts", "free_port", "free_ports_in_a_row", "port_holder", "port_taken"]


class Stopped(Exception):
    """A stop signal arrived before the daemon was running."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def say(line: str) -> None:
    print(f"run_local: {line}", file=sys.stderr, flush=True)


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
        self.broker_wanted = True  # `broker stop` / `broker start` flip it; watch() follows
        self.broker_up = False

    def on_broker_switch(self, signum: int, frame: FrameType | None) -> None:
        self.broker_wanted = signum == BROKER_SWITCH["start"]

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
        daemon = self.daemon
        assert daemon is not None
        broker_died = False
        while daemon.poll() is None:
            if not self.stopping and self.broker_wanted != self.broker_up:
                self.switch_broker()
            broker = self.broker
            assert broker is not None
            up = self.broker_up and not (broker_died or self.stopping)  # not stopped on purpose
            if up and broker.poll() is not None:
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
        wait_until(lambda: accepts(args.broker_port), self.broker, "pulsar-lite", str(log.name))

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
        wait_until(ready, self.broker, "Apache Pulsar", str(pulsar.log_path), timeout=180)

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
        wait_until(ready, self.broker, "the cluster", self.broker_log, timeout=300)

    def start_broker(self) -> None:
        data = Path(self.args.data)
        if self.args.broker == "apache":
            self.start_apache(data)
        elif self.args.broker == "cluster":
            self.start_cluster(data)
        else:
            self.start_lite(data)
        self.broker_up = True

    def switch_broker(self) -> None:
        """Stop the broker, or start it again on its port and data, as `broker stop` or
        `broker start` asked; the daemon rides the outage out meanwhile."""
        if self.args.broker == "cluster":
            say("broker stop/start is for one broker (lite, apache), not the cluster")
            self.broker_wanted = self.broker_up
            return
        if self.broker_wanted:
            self.start_broker()
            say(f"{self.broker_name} started again; pulsar-bruce reconnects and delivers")
        else:
            self.stop_broker()
            self.broker_up = False
            say(f"{self.broker_name} stopped; pulsar-bruce holds what it receives meanwhile "
                f"({make_command('broker-start', self.args)} starts it again)")  # fmt: skip
        self.write_state()

    def write_state(self) -> None:
        state = {"pid": os.getpid(), "broker": self.args.broker, "broker_up": self.broker_up}
        path = Path(self.args.run) / STATE
        path.with_suffix(".tmp").write_text(json.dumps(state))
        path.with_suffix(".tmp").replace(path)  # readers never see half of it

    def run(self) -> int:
        args = self.args
        Path(args.data).mkdir(parents=True, exist_ok=True)
        run = Path(args.run)
        run.mkdir(parents=True, exist_ok=True)
        self.start_broker()
        sock = run / "bruce.sock"
        self.daemon = start(
            [sys.executable, "-m", "pulsar_bruce", "--socket", str(sock),
             "--service-url", service_url(args),
             "--metrics-listen", f"{HOST}:{args.metrics_port}"],
            start_new_session=True,  # signals reach it from us only: SIGHUP would mean reload
        )  # fmt: skip
        wait_until(
            lambda: sock.exists() and accepts(args.metrics_port),
            self.daemon,
            "pulsar-bruce",
            "its log above",
        )
        self.daemon_ready = True
        self.write_state()
        print(hint(args, sock), flush=True)
        return self.watch()

    def stop(self) -> None:
        """The daemon first (it delivers what it holds), then the broker."""
        self.stopping = True  # from here on a signal goes to the daemon, or kills the broker
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            self.daemon.wait()
        self.stopping_broker = True  # a further signal kills it
        self.stop_broker()
        with contextlib.suppress(OSError):
            (Path(self.args.run) / STATE).unlink()

    def stop_broker(self) -> None:
        if self.broker is not None and self.broker.poll() is None:
            os.killpg(self.broker.pid, signal.SIGTERM)
            os.killpg(self.broker.pid, signal.SIGCONT)  # stopped (Ctrl-Z, SIGSTOP): wake it up
            try:  # the JVM closes its broker, bookie and metadata store: give it longer
                self.broker.wait(10 if self.args.broker == "lite" else 60)
            except subprocess.TimeoutExpired:
                os.killpg(self.broker.pid, signal.SIGKILL)
                self.broker.wait(10)


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
    parser.add_argument(
        "--data", help="broker data [./data; ./data-PORT with another --broker-port]"
    )
    parser.add_argument(
        "--run", help="daemon sockets [./run; ./run-PORT with another --broker-port]"
    )
    args = parser.parse_args(argv)
    data, run = default_dirs(args.broker_port)
    args.data, args.run = args.data or str(data), args.run or str(run)
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["broker"]:
        if argv[1:2] not in (["stop"], ["start"]):
            sys.exit("usage: run_local.py broker stop|start [--broker-port N | --run DIR]")
        return switch_broker(argv[1], parse_args(argv[2:]))
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
    others = {"BROKER_PORT": (args.broker_port, 3 if args.broker == "cluster" else 1),
              "METRICS_PORT": (args.metrics_port, 1)}  # fmt: skip
    refuse_taken_ports(ports, others)
    runner = Runner(args)
    for signum in STOP_SIGNALS:
        signal.signal(signum, runner.on_signal)
    for signum in BROKER_SWITCH.values():
        signal.signal(signum, runner.on_broker_switch)
    try:
        return runner.run()
    except Stopped as stopped:
        return 128 + stopped.signum
    finally:
        runner.stop()


if __name__ == "__main__":
    sys.exit(main())
