"""`make run`: pulsar-lite on 127.0.0.1:6650 (data in ./data) plus the daemon in the foreground.

The daemon's socket is ./run/bruce.sock and its metrics are on 127.0.0.1:9090.
Ctrl-C stops the daemon (which delivers what it buffered) and then the broker.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from pulsar_lite.binary_finder import find_pulsar_lite_binary

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
RUN = ROOT / "run"
BROKER_ADDR = ("127.0.0.1", 6650)
SOCKET = RUN / "bruce.sock"


def wait_for_port(
    address: tuple[str, int], broker: subprocess.Popen[bytes], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if broker.poll() is not None:
            sys.exit(f"pulsar-lite exited ({broker.returncode}); see {DATA / 'broker.log'}")
        try:
            with socket.create_connection(address, timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"pulsar-lite did not listen on {address[0]}:{address[1]} within {timeout:.0f} s")


def main() -> None:
    DATA.mkdir(exist_ok=True)
    RUN.mkdir(exist_ok=True)
    config = DATA / "pulsar-lite.toml"
    config.write_text("default_partitions = 4\n\n[metrics]\nenabled = false\n")
    with (DATA / "broker.log").open("ab") as log:
        broker = subprocess.Popen(
            [
                find_pulsar_lite_binary(),
                "--config",
                str(config),
                "--addr",
                f"{BROKER_ADDR[0]}:{BROKER_ADDR[1]}",
                "--db-path",
                str(DATA / "db"),
            ],
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    try:
        wait_for_port(BROKER_ADDR, broker, 30)
        bin_dir = Path(sys.executable).parent
        print(
            f"""
pulsar-lite is listening on pulsar://127.0.0.1:6650 (data in {DATA}).
Starting pulsar-bruce: socket {SOCKET}, metrics http://127.0.0.1:9090/metrics

In another terminal:
  send:     {bin_dir}/to_pulsar --socket-path {SOCKET} --topic demo --value hello --key k1
  observe:  curl -s 127.0.0.1:9090/metrics | grep -E '^pulsar_bruce_(received|acked)'
  read:     {bin_dir}/python -c "import pulsar; c = pulsar.Client('pulsar://127.0.0.1:6650'); \\
            r = c.create_reader('demo', pulsar.MessageId.earliest); m = r.read_next(5000); \\
            print(m.partition_key(), m.data()); c.close()"
Ctrl-C stops it.
""",
            flush=True,
        )
        daemon = subprocess.Popen(
            [
                str(bin_dir / "pulsar-bruce"),
                "--socket",
                str(SOCKET),
                "--service-url",
                "pulsar://127.0.0.1:6650",
                "--metrics-listen",
                "127.0.0.1:9090",
            ],
        )
        try:
            code = daemon.wait()
        except KeyboardInterrupt:
            daemon.send_signal(signal.SIGINT)
            code = daemon.wait()
        sys.exit(code)
    finally:
        os.killpg(broker.pid, signal.SIGTERM)
        broker.wait(10)


if __name__ == "__main__":
    main()
