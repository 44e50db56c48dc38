"""The senders' examples find the daemon ``make run`` started: the README's and
sending.md's shell examples, run as written in a checkout where it is up, reach its socket
``./run/bruce.sock``, not the systemd default ``/run/pulsar-bruce/bruce.sock`` (which a
new user next to ``make run`` lacks); spark.md's examples name its stream socket."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from to_pulsar import SOCKET_ENV_VAR

from tests.support.doc_blocks import block, shell_commands
from tests.support.processes import ROOT
from tests.support.senders import datagram_receiver

BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="bash not on PATH")


@pytest.mark.parametrize("page", ["README.md", "docs/sending.md"])
def test_the_shell_example_reaches_make_runs_socket(page: str, sock_path: Path) -> None:
    assert BASH is not None
    checkout = sock_path.parent  # short: ./run/bruce.sock must fit sun_path
    (checkout / "examples").symlink_to(ROOT / "examples")
    (checkout / "run").mkdir()
    text = block(page, "sh", "to_pulsar_send clicks")
    commands = [c for c in shell_commands(text) if "to_pulsar_send_stdin" not in c]
    env = dict(os.environ)
    env.pop(SOCKET_ENV_VAR, None)  # a new user's shell has none
    env["TO_PULSAR_CLI"] = f"{sys.executable} -m to_pulsar.cli"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "client_lib"), env.get("PYTHONPATH", "")])
    with datagram_receiver(checkout / "run" / "bruce.sock") as receiver:
        result = subprocess.run(
            [BASH, "-c", "set -e\n" + "\n".join(commands)],
            cwd=checkout, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        datagram = receiver.recv(65536)
    assert b"clicks" in datagram and datagram.endswith(b'{"user":42}')


def test_the_spark_examples_name_make_runs_stream_socket() -> None:
    """Copied next to ``make run``, spark.md's first examples write to its daemon (without
    the option they looked for /run/pulsar-bruce/bruce.stream.sock and failed)."""
    formats = block("docs/spark.md", "python", 'write.format("to_pulsar")\n')
    chains = formats.split("\n\n")
    assert [c for c in chains if 'format("to_pulsar")' in c]  # batch and stream
    for chain in chains:
        if 'format("to_pulsar")' in chain:
            assert '.option("socket", "./run/bruce.stream.sock")' in chain, chain
    written = block("docs/spark.md", "python", "summary = to_pulsar.spark.write(\n")
    assert 'socket="./run/bruce.stream.sock"' in written
    readme = block("README.md", "python", "to_pulsar.spark.write(")
    assert 'socket="./run/bruce.stream.sock"' in readme
