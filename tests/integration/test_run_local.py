"""examples/run_local.py, what `make run` runs: a real broker and daemon on free ports.

It stops both on SIGINT, SIGTERM and SIGHUP (and the kernel stops them if it is
killed outright), refuses to start on a taken port naming what holds it, and the
commands its hint prints send a message and read back just that message.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.processes import ROOT, free_port, wait_for

pytestmark = [
    pytest.mark.broker,
    pytest.mark.skipif(sys.platform != "linux", reason="reads /proc; PR_SET_PDEATHSIG"),
]
pytest.importorskip("pulsar_lite")

SCRIPT = ROOT / "examples" / "run_local.py"


def load_run_local() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_local", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run_local = load_run_local()


def gone(pid: int) -> bool:
    """No such process, or only its zombie left."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def env() -> dict[str, str]:
    environ = dict(os.environ)
    environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "daemon"), str(ROOT / "client_lib"), environ.get("PYTHONPATH", "")]
    )
    return environ


def two_free_ports() -> tuple[int, int]:
    first = free_port()
    second = free_port()
    while second == first:
        second = free_port()
    return first, second


@dataclass
class Run:
    process: subprocess.Popen[bytes]
    out: Path
    err: Path
    broker_port: int
    metrics_port: int

    def hint(self, what: str) -> list[str]:
        """The command the hint prints after ``what:``."""
        for line in self.out.read_text().splitlines():
            if line.strip().startswith(f"{what}:"):
                return shlex.split(line.split(":", 1)[1])
        raise AssertionError(f"no {what}: line in\n{self.out.read_text()}")


def launch(tmp_path: Path, broker_port: int, metrics_port: int, *extra: str) -> Run:
    out, err = tmp_path / "out", tmp_path / "err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--broker-port", str(broker_port),
             "--metrics-port", str(metrics_port), "--data", str(tmp_path / "data"),
             "--run", str(tmp_path / "run"), *extra],
            stdout=stdout, stderr=stderr, env=env(),
        )  # fmt: skip
    return Run(process, out, err, broker_port, metrics_port)


@contextlib.contextmanager
def serving(tmp_path: Path, *extra: str, timeout: float = 60) -> Iterator[Run]:
    """run_local.py, started and serving (its hint printed); killed at the end if need be."""
    run = launch(tmp_path, *two_free_ports(), *extra)
    try:
        wait_for(
            lambda: "Ctrl-C stops it." in run.out.read_text() or run.process.poll() is not None,
            timeout,
            "run_local to start",
        )
        assert run.process.poll() is None, run.err.read_text()
        yield run
    finally:
        if run.process.poll() is None:
            run.process.kill()  # its children get SIGTERM from the kernel
        run.process.wait(timeout)


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Run]:
    """run_local.py, started and serving (its hint printed)."""
    with serving(tmp_path) as run:
        yield run


def children(run: Run) -> tuple[int, int]:
    broker, _ = run_local.port_holder(run.broker_port)
    daemon, _ = run_local.port_holder(run.metrics_port)
    assert broker is not None and daemon is not None and broker != daemon
    return broker, daemon


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_stop_signal_stops_the_daemon_then_the_broker(running: Run, signum: int) -> None:
    broker, daemon = children(running)
    running.process.send_signal(signum)
    assert running.process.wait(60) == 0  # the daemon delivered what it had, and exited 0
    assert gone(daemon) and gone(broker)
    assert not run_local.port_taken(running.broker_port)
    assert not run_local.port_taken(running.metrics_port)
    # SIGINT (Ctrl-C) is passed on as itself, so the daemon's log says what was pressed;
    # SIGHUP as SIGTERM (it would mean "reload" to the daemon).
    passed = "SIGINT" if signum == signal.SIGINT else "SIGTERM"
    assert f"received {passed}, shutting down" in running.err.read_text()


def test_a_second_ctrl_c_stops_the_daemon_at_once(running: Run) -> None:
    """With the broker not answering (stopped), the daemon would wait --shutdown-timeout-s
    (30 s) for a receipt; it says so, and a second Ctrl-C passed on ends the wait."""
    broker, daemon = children(running)
    group = os.getpgid(broker)
    os.killpg(group, signal.SIGSTOP)
    try:
        subprocess.run(running.hint("send"), check=True, env=env(), timeout=30)
        wait_for(lambda: "pulsar_bruce_received_total 1.0" in scrape(running), 30, "the message")
        running.process.send_signal(signal.SIGINT)
        wait_for(lambda: "waiting up to 30 s" in running.err.read_text(), 30, "the wait's line")
        running.process.send_signal(signal.SIGINT)
        assert running.process.wait(20) == 0  # well before the 30 s
    finally:
        with contextlib.suppress(ProcessLookupError):  # run_local sent it already, unless
            os.killpg(group, signal.SIGCONT)  # the test failed: leave no stopped broker
    log = running.err.read_text()
    assert (
        "waiting up to 30 s (--shutdown-timeout-s) for the broker to acknowledge 1 buffered "
        "messages, then discarding the rest; a second Ctrl-C or SIGTERM stops now"
    ) in log
    assert "received SIGINT again: not waiting for receipts any longer" in log
    assert "shutdown cut short: discarded 1 unacknowledged messages" in log
    wait_for(lambda: gone(daemon) and gone(broker), 30, "broker and daemon to stop")


def test_a_broker_that_exits_is_reported_in_one_line_and_stops_the_daemon(
    running: Run, tmp_path: Path
) -> None:
    broker, daemon = children(running)
    os.kill(broker, signal.SIGKILL)
    assert running.process.wait(30) == 1
    said = [line for line in running.err.read_text().splitlines() if line.startswith("run_local")]
    assert said == [
        f"run_local: pulsar-lite exited (killed by SIGKILL); see {tmp_path / 'data' / 'broker.log'}"
        "; stopping pulsar-bruce"
    ]
    assert gone(daemon)
    assert not run_local.port_taken(running.metrics_port)


def scrape(run: Run) -> str:
    import urllib.request

    url = f"http://127.0.0.1:{run.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


def test_killed_outright_its_children_follow(running: Run) -> None:
    broker, daemon = children(running)
    running.process.kill()
    running.process.wait(10)
    wait_for(lambda: gone(broker) and gone(daemon), 60, "broker and daemon to stop")


def test_the_hint_sends_a_message_and_reads_back_only_that(running: Run) -> None:
    send, read = running.hint("send"), running.hint("read")
    # Every sender finds the daemon once the printed variable is exported.
    assert running.hint("senders")[:2] == [
        "export",
        f"TO_PULSAR_SOCKET={send[send.index('--socket-path') + 1]}",
    ]
    assert read[-2:] == ["--service-url", f"pulsar://127.0.0.1:{running.broker_port}"]
    subprocess.run(send, check=True, env=env(), timeout=30)
    metrics = f"http://127.0.0.1:{running.metrics_port}/metrics"

    def acked() -> bool:
        import urllib.request

        with urllib.request.urlopen(metrics, timeout=5) as response:
            return "pulsar_bruce_acked_total 1.0" in response.read().decode()

    wait_for(acked, 30, "the message to be acked")
    done = subprocess.run(read, capture_output=True, text=True, env=env(), timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "key=k1 value=hello\n", "")


def switch(run: Run, action: str) -> subprocess.CompletedProcess[str]:
    """``run_local.py broker stop|start`` (``make broker-stop``), as the hint prints it."""
    command = run.hint("outage")
    assert command[:2] == [sys.executable, str(SCRIPT)]  # --run is not make's default here
    stop = command[: command.index("then")]
    stop[-1] = stop[-1].rstrip(",")
    stop[stop.index("stop")] = action
    return subprocess.run(stop, capture_output=True, text=True, env=env(), timeout=60)


def test_the_broker_stops_and_starts_again_while_the_daemon_rides_it_out(running: Run) -> None:
    """``make broker-stop`` / ``make broker-start``: the outage an operator tries first;
    each returns once done, ``make run`` goes on, and what was sent meanwhile is delivered."""
    broker, daemon = children(running)
    stopped = switch(running, "stop")
    assert (stopped.returncode, stopped.stderr) == (0, "run_local: the broker is down\n")
    assert gone(broker) and not run_local.accepts(running.broker_port)
    assert running.process.poll() is None and not gone(daemon)
    subprocess.run(running.hint("send"), check=True, env=env(), timeout=30)
    wait_for(lambda: "pulsar_bruce_buffered_messages 1.0" in scrape(running), 30, "it buffered")
    assert switch(running, "stop").returncode == 0  # already down: says so
    started = switch(running, "start")
    assert (started.returncode, started.stderr) == (0, "run_local: the broker is up\n")
    wait_for(lambda: "pulsar_bruce_acked_total 1.0" in scrape(running), 60, "the message acked")
    said = [line for line in running.err.read_text().splitlines() if line.startswith("run_local")]
    assert said[0].startswith(
        "run_local: pulsar-lite stopped; pulsar-bruce holds what it receives meanwhile ("
    )
    assert said[1:] == [
        "run_local: pulsar-lite started again; pulsar-bruce reconnects and delivers"
    ]
    running.process.send_signal(signal.SIGTERM)
    assert running.process.wait(60) == 0


@pytest.mark.apache
def test_on_apache_pulsar_the_broker_stops_and_starts_again_too(tmp_path: Path) -> None:
    """``make broker-stop`` / ``broker-start`` with ``make run PULSAR=apache``: the JVM
    stops, starts again on the same port and data, and what was sent meanwhile arrives."""
    apache = ("--broker", "apache", "--web-port", str(free_port()))
    with serving(tmp_path, *apache, timeout=180) as run:
        assert switch(run, "stop").returncode == 0
        assert not run_local.accepts(run.broker_port) and run.process.poll() is None
        subprocess.run(run.hint("send"), check=True, env=env(), timeout=30)
        assert switch(run, "start").returncode == 0
        wait_for(lambda: "pulsar_bruce_acked_total 1.0" in scrape(run), 120, "the message acked")
        done = subprocess.run(run.hint("read"), capture_output=True, text=True, env=env(),
                              timeout=60)  # fmt: skip
        assert (done.returncode, done.stdout) == (0, "key=k1 value=hello\n")
        run.process.send_signal(signal.SIGTERM)
        assert run.process.wait(90) == 0


def test_broker_stop_without_a_running_copy_says_so_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "broker", "stop", "--run", str(tmp_path)],
        capture_output=True, text=True, env=env(), timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    said = f"run_local: no make run is running with its sockets in {tmp_path}"
    assert done.stderr.startswith(said)
    assert done.stderr.count("\n") == 1
    # A stale state file whose pid is another process's now: that one is not signalled.
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        state = {"pid": sleeper.pid, "broker": "lite", "broker_up": True}
        (tmp_path / "run_local.json").write_text(json.dumps(state))
        done = subprocess.run(
            [sys.executable, str(SCRIPT), "broker", "stop", "--run", str(tmp_path)],
            capture_output=True, text=True, env=env(), timeout=60,
        )  # fmt: skip
        assert done.returncode == 1 and done.stderr.startswith(said)
        assert sleeper.poll() is None  # SIGUSR1 would have ended it
    finally:
        sleeper.kill()
        sleeper.wait()


def test_make_run_passes_the_ports_and_a_second_copy_gets_its_own_directories() -> None:
    make = subprocess.run(
        ["make", "-n", "--no-print-directory", "run", "broker-stop", "BROKER_PORT=6660",
         "METRICS_PORT=9091", "RUN_ARGS=--web-port 8090"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert make.returncode == 0, make.stderr
    assert "examples/run_local.py --broker lite --broker-port 6660 --metrics-port 9091 " \
        "--web-port 8090" in " ".join(make.stdout.split())  # fmt: skip
    assert "examples/run_local.py broker stop --broker-port 6660" in make.stdout
    args = run_local.parse_args(["--broker-port", "6660"])
    assert (args.data, args.run) == (str(ROOT / "data-6660"), str(ROOT / "run-6660"))
    args = run_local.parse_args([])
    assert (args.data, args.run) == (str(ROOT / "data"), str(ROOT / "run"))


def test_taken_ports_are_refused_in_one_line_naming_the_holder(tmp_path: Path) -> None:
    with socket.socket() as broker_port, socket.socket() as metrics_port:
        for sock in (broker_port, metrics_port):
            sock.bind(("127.0.0.1", 0))
            sock.listen()
        ports = broker_port.getsockname()[1], metrics_port.getsockname()[1]
        command = Path("/proc/self/cmdline").read_text().replace("\0", " ").strip()
        command = command if len(command) <= 100 else command[:97] + "..."
        holder = f"pid {os.getpid()} ({command})"
        assert run_local.port_holder(ports[0]) == (os.getpid(), holder)

        run = launch(tmp_path, *ports)
        assert run.process.wait(30) == 1
        said = run.err.read_text()
        assert said.startswith(
            f"run_local: not starting: port {ports[0]} (the broker) is taken by {holder}; "
            f"port {ports[1]} (metrics) is taken by {holder}; other ports: make run "
            f"BROKER_PORT="
        )
        assert said.count("\n") == 1 and " METRICS_PORT=" in said

        run = launch(tmp_path, ports[0], free_port())
        assert run.process.wait(30) == 1
        assert "(metrics)" not in run.err.read_text()
        assert "METRICS_PORT" not in run.err.read_text()  # only what must change
    assert not (tmp_path / "data").exists()  # nothing was started


@pytest.mark.apache
def test_on_apache_pulsar_the_hint_round_trips_and_sigterm_stops_both(tmp_path: Path) -> None:
    """``--broker apache`` (``make run PULSAR=apache``): the same demo on Apache Pulsar
    standalone, its data under --data/apache-pulsar, stopped cleanly by SIGTERM."""
    broker_port, metrics_port = two_free_ports()
    web_port = free_port()
    run = launch(tmp_path, broker_port, metrics_port, "--broker", "apache", "--web-port",
                 str(web_port))  # fmt: skip
    try:
        wait_for(
            lambda: "Ctrl-C stops it." in run.out.read_text() or run.process.poll() is not None,
            120,
            "run_local --broker apache to start",
        )
        assert run.process.poll() is None, run.err.read_text()
        assert (
            f"Apache Pulsar standalone is listening on pulsar://127.0.0.1:{broker_port} "
            f"(admin http://127.0.0.1:{web_port}; data in {tmp_path / 'data' / 'apache-pulsar'})"
        ) in run.out.read_text()
        broker, daemon = children(run)
        assert "org.apache.pulsar.PulsarStandaloneStarter" in Path(
            f"/proc/{broker}/cmdline"
        ).read_text().replace("\0", " ")

        subprocess.run(run.hint("send"), check=True, env=env(), timeout=30)
        done = subprocess.run(run.hint("read"), capture_output=True, text=True, env=env(),
                              timeout=60)  # fmt: skip
        assert (done.returncode, done.stdout, done.stderr) == (0, "key=k1 value=hello\n", "")
        assert run.hint("admin")[-1] == f"http://127.0.0.1:{web_port}/admin/v2/tenants"
        tenants = subprocess.run(run.hint("admin"), capture_output=True, text=True, timeout=30)
        assert "public" in json.loads(tenants.stdout)

        run.process.send_signal(signal.SIGTERM)
        assert run.process.wait(90) == 0
        assert gone(daemon) and gone(broker)
        for port in (broker_port, metrics_port, web_port):
            assert not run_local.port_taken(port)
        assert (tmp_path / "data" / "apache-pulsar" / "standalone.conf").is_file()
    finally:
        if run.process.poll() is None:
            run.process.kill()  # its children get SIGTERM from the kernel
        run.process.wait(90)


def jvms_under(directory: Path) -> list[int]:
    """The pids of processes whose working directory is under ``directory``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if str(directory) in os.readlink(entry / "cwd"):
                    found.append(int(entry.name))
    return found


@pytest.mark.apache
def test_on_the_cluster_the_hint_round_trips_and_sigterm_stops_every_jvm(tmp_path: Path) -> None:
    """``--broker cluster`` (``make run PULSAR=cluster``): three brokers on consecutive
    ports, the daemon given all three, the hint's send and read work against that service
    URL, and SIGTERM stops the daemon and all five JVMs."""
    broker_port = run_local.free_ports_in_a_row(3)  # below the ephemeral range: an outgoing
    web_port = run_local.free_ports_in_a_row(3)  # connection cannot take one meanwhile
    metrics_port = free_port()
    run = launch(tmp_path, broker_port, metrics_port, "--broker", "cluster", "--web-port",
                 str(web_port))  # fmt: skip
    try:
        wait_for(
            lambda: "Ctrl-C stops it." in run.out.read_text() or run.process.poll() is not None,
            300,
            "run_local --broker cluster to start",
        )
        assert run.process.poll() is None, run.err.read_text()
        url = ",".join(f"127.0.0.1:{broker_port + i}" for i in range(3))
        assert f"A three-broker Apache Pulsar cluster is listening on pulsar://{url}" in (
            run.out.read_text()
        )
        data = tmp_path / "data" / "apache-cluster"
        assert len(jvms_under(data)) == 5  # ZooKeeper, the bookie, three brokers
        subprocess.run(run.hint("send"), check=True, env=env(), timeout=30)
        done = subprocess.run(run.hint("read"), capture_output=True, text=True, env=env(),
                              timeout=60)  # fmt: skip
        assert (done.returncode, done.stdout, done.stderr) == (0, "key=k1 value=hello\n", "")
        run.process.send_signal(signal.SIGTERM)
        assert run.process.wait(120) == 0
        wait_for(lambda: not jvms_under(data), 60, "every JVM of the cluster to stop")
    finally:
        if run.process.poll() is None:
            run.process.kill()  # its children get SIGTERM from the kernel
        run.process.wait(120)


@pytest.mark.apache
def test_on_apache_pulsar_a_broker_that_exits_is_reported_too(tmp_path: Path) -> None:
    """The same watch covers ``--broker apache``: its name and its log in the line."""
    broker_port, metrics_port = two_free_ports()
    run = launch(tmp_path, broker_port, metrics_port, "--broker", "apache", "--web-port",
                 str(free_port()))  # fmt: skip
    try:
        wait_for(
            lambda: "Ctrl-C stops it." in run.out.read_text() or run.process.poll() is not None,
            120,
            "run_local --broker apache to start",
        )
        assert run.process.poll() is None, run.err.read_text()
        broker, daemon = children(run)
        os.kill(broker, signal.SIGKILL)
        assert run.process.wait(30) == 1
        said = [line for line in run.err.read_text().splitlines() if line.startswith("run_local")]
        log = tmp_path / "data" / "apache-pulsar" / "broker.log"
        assert said == [
            f"run_local: Apache Pulsar exited (killed by SIGKILL); see {log}; stopping pulsar-bruce"
        ]
        assert gone(daemon)
    finally:
        if run.process.poll() is None:
            run.process.kill()  # its children get SIGTERM from the kernel
        run.process.wait(90)
