"""The running ``make run``'s outside: the hint it prints, its state file, and
``run_local.py broker stop|start``.

A copy of examples/run_local.py writes its pid, its broker and whether that broker is up
to ``run_local.json`` in its --run directory; ``broker stop`` and ``broker start`` signal it
(SIGUSR1, SIGUSR2) and wait until the file says it is done.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

from run_local_ports import HOST

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# `run_local.py broker stop|start` (make broker-stop, make broker-start): to the running copy.
BROKER_SWITCH = {"stop": signal.SIGUSR1, "start": signal.SIGUSR2}
STATE = "run_local.json"  # in --run: this copy's pid, broker and whether it is up


def default_dirs(broker_port: int) -> tuple[Path, Path]:
    """--data and --run: ./data and ./run on the default port; ./data-PORT and ./run-PORT
    for a copy on another one, so that a second copy beside the first needs only ports."""
    if broker_port == 6650:
        return ROOT / "data", ROOT / "run"
    return ROOT / f"data-{broker_port}", ROOT / f"run-{broker_port}"


def make_command(target: str, args: argparse.Namespace) -> str:
    """How to run ``broker-stop`` / ``broker-start`` against this copy."""
    if Path(args.run) != default_dirs(args.broker_port)[1]:
        return f"{sys.executable} {HERE / 'run_local.py'} broker {target[7:]} --run {args.run}"
    port = f" BROKER_PORT={args.broker_port}" if args.broker_port != 6650 else ""
    return f"make {target}{port}"


def switch_broker(action: str, args: argparse.Namespace) -> int:
    """``broker stop|start``: ask the running copy (its pid in --run's state file), and
    return once it says the broker is down, or up again."""
    path = Path(args.run) / STATE
    try:
        state = json.loads(path.read_text())
        # Alive, and run_local itself: a stale file's pid may be anyone's by now (SIGUSR1
        # would end it).
        if b"run_local.py" not in Path(f"/proc/{int(state['pid'])}/cmdline").read_bytes():
            raise ProcessLookupError
    except (OSError, ValueError, KeyError, TypeError):
        sys.exit(f"run_local: no make run is running with its sockets in {args.run} ({path} "
                 "names none); give BROKER_PORT as for its make run, or --run")  # fmt: skip
    if state["broker"] == "cluster":
        sys.exit("run_local: broker stop/start is for one broker (make run, make run "
                 "PULSAR=apache), not the cluster: kill one of its brokers instead")  # fmt: skip
    wanted = action == "start"
    if state["broker_up"] != wanted:
        os.kill(state["pid"], BROKER_SWITCH[action])
    deadline = time.monotonic() + (30 if state["broker"] == "lite" else 240)
    while state.get("broker_up") != wanted:
        if time.monotonic() > deadline:
            sys.exit(f"run_local: the broker did not {action} in time; see make run's output")
        time.sleep(0.1)
        with contextlib.suppress(OSError, ValueError):
            state = json.loads(path.read_text())
    print(f"run_local: the broker is {'up' if wanted else 'down'}", file=sys.stderr)
    return 0


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
        admin = (
            f"\n  admin:    curl -s http://{HOST}:{args.web_port}/admin/v2/brokers/bruce-cluster"
        )
    elif args.broker == "apache":
        broker = (
            f"Apache Pulsar standalone is listening on {url} (admin http://{HOST}:"
            f"{args.web_port}; data in {Path(args.data) / 'apache-pulsar'})."
        )
        # Tenants, namespaces, policies: docs/deploying.md#tenants-and-namespaces.
        admin = f"\n  admin:    curl -s http://{HOST}:{args.web_port}/admin/v2/tenants"
    else:
        broker = f"pulsar-lite is listening on {url} (data in {args.data})."
    outage = ""
    if args.broker != "cluster":
        stop, start_again = make_command("broker-stop", args), make_command("broker-start", args)
        outage = f"\n  outage:   {stop}, then {start_again} (the daemon rides it out)"
    return f"""
{broker}
pulsar-bruce: socket {sock}, metrics http://{HOST}:{args.metrics_port}/metrics

In another terminal:
  send:     {bin_dir}/to_pulsar --socket-path {sock} --topic demo --value hello --key k1
  senders:  export TO_PULSAR_SOCKET={sock}    # to_pulsar, the C, Perl and shell senders
  observe:  curl -s {HOST}:{args.metrics_port}/metrics | grep -E '^pulsar_bruce_(received|acked)'
  read:     {python} {ROOT / "examples" / "read_back.py"} --topic demo{read_url}{admin}{outage}
Ctrl-C stops it."""
