"""Sender tests against a real UNIX datagram socket; no sleeps, only socket timeouts."""

from __future__ import annotations

import ast
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import to_pulsar
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from to_pulsar import (
    DaemonUnavailableError,
    MessageTooLargeError,
    Sender,
    SendTimeoutError,
    ToPulsarError,
    encode_any_partition,
    encode_partition_key,
)
from to_pulsar.core import encode_message
from to_pulsar.paths import DEFAULT_SOCKET_PATH, SOCKET_ENV_VAR, resolve_socket_path

from tests.unit.client_lib.conftest import bind

PACKAGE_DIR = Path(to_pulsar.__file__).resolve().parent


def test_send_any_partition_exact_bytes(sock_path: Path, receiver: socket.socket) -> None:
    with Sender(sock_path) as sender:
        sender.send("t", b"value", key=b"k", timestamp_ms=123)
    assert receiver.recv(65536) == encode_any_partition("t", b"value", b"k", 123)


def test_send_partition_key_exact_bytes(sock_path: Path, receiver: socket.socket) -> None:
    with Sender(str(sock_path)) as sender:
        sender.send("a/b/c", "välue", partition_key=-1, timestamp_ms=0)
    assert receiver.recv(65536) == encode_partition_key(0xFFFFFFFF, "a/b/c", "välue".encode())


def test_default_timestamp_is_now_ms(sock_path: Path, receiver: socket.socket) -> None:
    before = time.time_ns() // 1_000_000
    with Sender(sock_path) as sender:
        sender.send("t", b"v")
    after = time.time_ns() // 1_000_000
    datagram = receiver.recv(65536)
    # header 8 + flags 2 + topic size 2 + topic "t" 1, then the int64 timestamp
    timestamp = int.from_bytes(datagram[13:21], "big", signed=True)
    assert before <= timestamp <= after
    assert datagram == encode_any_partition("t", b"v", timestamp_ms=timestamp)


def test_send_raw(sock_path: Path, receiver: socket.socket) -> None:
    datagram = encode_any_partition("t", b"v")
    with Sender(sock_path) as sender:
        for _ in range(3):
            sender.send_raw(datagram)
    assert [receiver.recv(65536) for _ in range(3)] == [datagram] * 3


def test_env_var_default(
    sock_path: Path, receiver: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SOCKET_ENV_VAR, str(sock_path))
    with Sender() as sender:
        assert sender.socket_path == str(sock_path)
        sender.send("t", b"v", timestamp_ms=0)
    assert receiver.recv(65536) == encode_any_partition("t", b"v")


def test_resolve_socket_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SOCKET_ENV_VAR, raising=False)
    assert resolve_socket_path() == DEFAULT_SOCKET_PATH == "/run/pulsar-bruce/bruce.sock"
    monkeypatch.setenv(SOCKET_ENV_VAR, "")
    assert resolve_socket_path() == DEFAULT_SOCKET_PATH
    monkeypatch.setenv(SOCKET_ENV_VAR, "/x/env.sock")
    assert resolve_socket_path() == "/x/env.sock"
    assert resolve_socket_path(Path("/x/arg.sock")) == "/x/arg.sock"


def test_missing_socket(sock_path: Path) -> None:
    with pytest.raises(DaemonUnavailableError, match=str(sock_path)):
        Sender(sock_path)


def test_socket_file_without_listener(sock_path: Path) -> None:
    bind(sock_path).close()  # leaves a stale socket file behind, like a crashed daemon
    with pytest.raises(DaemonUnavailableError, match="no daemon listening"):
        Sender(sock_path)


def test_message_too_large(sock_path: Path, receiver: socket.socket) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
        limit = probe.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
    value = b"x" * max(300_000, 2 * limit)
    with Sender(sock_path) as sender:
        with pytest.raises(MessageTooLargeError, match="too large") as info:
            sender.send("t", value)
        assert info.value.size == len(value) + 28 + 1
        with pytest.raises(MessageTooLargeError):
            sender.send_raw(encode_any_partition("t", value))
        sender.send("t", b"small", timestamp_ms=0)  # the sender is still usable
    assert receiver.recv(65536) == encode_any_partition("t", b"small")


def fill_until_timeout(sender: Sender) -> SendTimeoutError:
    for _ in range(100_000):
        try:
            sender.send("t", b"x" * 100, timestamp_ms=0)
        except SendTimeoutError as exc:
            return exc
    pytest.fail("queue never filled up")


def test_full_queue_times_out(sock_path: Path, receiver: socket.socket) -> None:
    with Sender(sock_path, timeout=0.05) as sender:
        exc = fill_until_timeout(sender)
        assert "0.05" in str(exc)
        started = time.monotonic()
        with pytest.raises(SendTimeoutError):
            sender.send("t", b"x", timestamp_ms=0)
        assert time.monotonic() - started >= 0.04
        # Draining makes room again: a blocked sender recovers without reconnecting.
        receiver.recv(65536)
        sender.send("t", b"after", timestamp_ms=0)


def test_non_blocking_sender(sock_path: Path, receiver: socket.socket) -> None:
    with Sender(sock_path, timeout=0) as sender:
        assert "queue is full" in str(fill_until_timeout(sender))


def test_negative_timeout_rejected(sock_path: Path, receiver: socket.socket) -> None:
    with pytest.raises(ValueError, match="timeout"):
        Sender(sock_path, timeout=-1)


def test_reconnects_after_daemon_restart(sock_path: Path) -> None:
    first = bind(sock_path)
    with Sender(sock_path) as sender:
        sender.send("t", b"one", timestamp_ms=0)
        assert first.recv(65536) == encode_any_partition("t", b"one")
        first.close()
        sock_path.unlink()
        second = bind(sock_path)  # the restarted daemon
        try:
            sender.send("t", b"two", timestamp_ms=0)
            assert second.recv(65536) == encode_any_partition("t", b"two")
        finally:
            second.close()


def test_daemon_gone_then_back(sock_path: Path) -> None:
    first = bind(sock_path)
    with Sender(sock_path) as sender:
        first.close()
        sock_path.unlink()
        with pytest.raises(DaemonUnavailableError, match=str(sock_path)):
            sender.send("t", b"lost")
        with pytest.raises(DaemonUnavailableError):
            sender.send("t", b"still lost")
        second = bind(sock_path)
        try:
            sender.send("t", b"back", timestamp_ms=0)
            assert second.recv(65536) == encode_any_partition("t", b"back")
        finally:
            second.close()


def test_closed_sender(sock_path: Path, receiver: socket.socket) -> None:
    sender = Sender(sock_path)
    sender.close()
    sender.close()
    assert "closed" in repr(sender)
    with pytest.raises(ToPulsarError, match="closed"):
        sender.send("t", b"v")
    with pytest.raises(ToPulsarError, match="closed"):
        sender.send_raw(b"v")


def test_invalid_message_raises_before_sending(sock_path: Path, receiver: socket.socket) -> None:
    with Sender(sock_path) as sender, pytest.raises(ValueError, match="topic"):
        sender.send("", b"v")


#: Imports made inside a function that runs only in a Spark task with Arrow batches.
LAZY_IN_SPARK_TASKS = {("spark_task.py", "pyarrow"), ("spark_exactly_once.py", "pyspark")}
#: The modules that import click, or pyspark, numpy and pyarrow (the [spark] extra).
NOT_STDLIB_ONLY = {"cli.py", "spark.py", "spark_driver.py", "spark_warm_up.py", "spark_arrow.py"}


def test_package_imports_only_stdlib() -> None:
    """Everything but cli.py (click), spark.py, spark_driver.py and spark_warm_up.py
    (pyspark, the [spark] extra) and spark_arrow.py (numpy and pyarrow, imported by a Spark
    task only once an Arrow batch comes) must import with a bare interpreter (no click, no
    deps); none of these five is imported by the package itself, and the rest imports a
    third-party module only inside a function that runs in a Spark task
    (``LAZY_IN_SPARK_TASKS``)."""
    for module in PACKAGE_DIR.glob("*.py"):
        if module.name in NOT_STDLIB_ONLY:
            continue
        tree = ast.parse(module.read_text())
        top_level = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if id(node) not in top_level and (module.name, top) in LAZY_IN_SPARK_TASKS:
                    continue
                assert top in sys.stdlib_module_names, f"{module.name} imports {name}"


def test_import_does_not_load_click() -> None:
    code = (
        "import sys, to_pulsar; "
        "assert 'click' not in sys.modules, 'click imported'; "
        "assert 'to_pulsar.cli' not in sys.modules"
    )
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_DIR.parent)}
    subprocess.run([sys.executable, "-S", "-c", code], check=True, env=env, timeout=60)


def test_py_typed_marker() -> None:
    assert (PACKAGE_DIR / "py.typed").is_file()


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    topic=st.sampled_from(["t", "persistent://public/default/orders", b"bytes-topic"]),
    value=st.one_of(st.binary(max_size=300), st.text(max_size=50), st.just(bytearray(b"ba"))),
    key=st.one_of(st.none(), st.binary(max_size=8)),
    partition_key=st.one_of(st.none(), st.integers(-(2**31), 2**32 - 1), st.integers()),
    timestamp_ms=st.one_of(st.integers(0, 2**63 - 1), st.integers()),
    properties=st.one_of(st.none(), st.just({}), st.just({"a": "b"})),
)
def test_send_inline_encoding_gives_encode_messages_bytes_or_error(
    sock_path: Path,
    receiver: socket.socket,
    topic: str | bytes,
    value: bytes | str | bytearray,
    key: bytes | None,
    partition_key: int | None,
    timestamp_ms: int,
    properties: dict[str, str] | None,
) -> None:
    """``Sender.send`` encodes the usual message inline: the same datagram as
    ``encode_message``, or the same error for a value out of range."""
    try:
        expected: bytes | type[Exception] = encode_message(
            topic, value, key, partition_key, timestamp_ms, properties
        )
    except ToPulsarError as exc:
        expected = type(exc)
    with Sender(sock_path) as sender:
        try:
            sender.send(
                topic, value, key=key, partition_key=partition_key, timestamp_ms=timestamp_ms,
                properties=properties,
            )  # fmt: skip
        except ToPulsarError as exc:
            assert expected is type(exc)
            return
    assert receiver.recv(65536) == expected
