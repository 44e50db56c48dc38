"""The Perl sender (examples/perl): byte for byte against to_pulsar, then daemon + broker."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from to_pulsar import InvalidMessageError, encode_any_partition, encode_partition_key
from to_pulsar.topics import full_topic_name

from tests.support.consume import consume
from tests.support.processes import ROOT, Broker
from tests.support.topic_names import topic_names

PERL_DIR = ROOT / "examples" / "perl"
SEND_PL = PERL_DIR / "to_pulsar_send.pl"
PERL = shutil.which("perl")

pytestmark = pytest.mark.skipif(PERL is None, reason="perl not on PATH")


def perl(script: str, *args: str | Path) -> subprocess.CompletedProcess[bytes]:
    """Run ``script`` with ToPulsar on @INC; arguments go to @ARGV."""
    assert PERL is not None
    return subprocess.run(
        [PERL, "-I", str(PERL_DIR), "-MToPulsar", "-we", script, *map(str, args)],
        capture_output=True,
        timeout=60,
    )


def send_pl(*args: str | Path) -> subprocess.CompletedProcess[str]:
    assert PERL is not None
    return subprocess.run(
        [PERL, str(SEND_PL), *map(str, args)], capture_output=True, text=True, timeout=60
    )


def test_module_bytes_match_python(sock_path: Path, receiver: socket.socket) -> None:
    script = r"""
        my $tp = ToPulsar->new($ARGV[0]);
        $tp->send_any('t', 'value', 'k', 123);
        $tp->send_keyed(-1, 'a/b/c', "v\x{263a}lue", undef, 0);     # character string: UTF-8
        $tp->send_any('persistent://x/y/z', "a\0b\xfe", "\0\xff", -1);  # byte strings as is
        $tp->send_keyed(4294967295, 't', '', 'key', 1700000000000);
        print ToPulsar::encode_any_partition('t', 'v', '', 0) eq
              pack('H*', $ARGV[1]) ? "same\n" : "differs\n";
        $tp->close;
        eval { $tp->send_any('t', 'v') };
        print $@;
    """
    result = perl(script, sock_path, encode_any_partition("t", b"v").hex())
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().splitlines() == ["same", "ToPulsar: sender is closed"]
    expected = [
        encode_any_partition("t", b"value", b"k", 123),
        encode_partition_key(-1, "a/b/c", "v\u263alue".encode()),
        encode_any_partition("persistent://x/y/z", b"a\x00b\xfe", b"\x00\xff", -1),
        encode_partition_key(0xFFFFFFFF, "t", b"", b"key", 1_700_000_000_000),
    ]
    assert [receiver.recv(65536) for _ in expected] == expected


def test_default_timestamp_and_env_socket(sock_path: Path, receiver: socket.socket) -> None:
    before = time.time_ns() // 1_000_000
    result = perl("$ENV{TO_PULSAR_SOCKET} = $ARGV[0]; ToPulsar->new->send_any('t', 'v')", sock_path)
    after = time.time_ns() // 1_000_000
    assert result.returncode == 0, result.stderr
    datagram = receiver.recv(65536)
    timestamp = int.from_bytes(datagram[13:21], "big", signed=True)
    assert before <= timestamp <= after
    assert datagram == encode_any_partition("t", b"v", timestamp_ms=timestamp)


def test_script_bytes_match_python(sock_path: Path, receiver: socket.socket) -> None:
    assert send_pl(sock_path, "a/b/c", "hello", "k1", "7").returncode == 0
    assert send_pl(sock_path, "t", "v").returncode == 0
    keyed, plain = receiver.recv(65536), receiver.recv(65536)
    ts = int.from_bytes(keyed[21:29], "big")
    assert keyed == encode_partition_key(7, "a/b/c", b"hello", b"k1", ts)
    ts = int.from_bytes(plain[13:21], "big")
    assert plain == encode_any_partition("t", b"v", b"", ts)


def test_errors_die_with_a_clear_message(sock_path: Path) -> None:
    missing = perl("ToPulsar->new($ARGV[0])", sock_path)
    assert missing.returncode != 0
    assert missing.stderr.decode() == f"ToPulsar: no daemon listening on {sock_path} " + (
        "(No such file or directory)\n"
    )
    bad = perl("ToPulsar::encode_any_partition('', 'v')")
    assert b"ToPulsar: topic must be 1..32767 bytes, got 0 bytes" in bad.stderr
    bad = perl("ToPulsar::encode_partition_key(2**32, 't', 'v')")
    assert b"ToPulsar: partition key must be an integer" in bad.stderr

    cli = send_pl(sock_path, "t", "v")
    assert cli.returncode == 1
    assert cli.stderr == f"to_pulsar_send.pl: error: no daemon listening on {sock_path} " + (
        "(No such file or directory)\n"
    )
    assert send_pl(sock_path, "", "v").returncode == 2
    assert send_pl(sock_path, "t", "v", "", "nope").returncode == 2
    assert send_pl(sock_path, "t").returncode == 2


def test_the_topic_check_is_the_daemons_rule() -> None:
    """ToPulsar::check_topic accepts exactly the names the daemon does (the Python
    sender's copy of its rule, itself held to the daemon's by a property test)."""
    names = topic_names()
    script = r"""
        while (my $hex = <STDIN>) {
            chomp $hex;
            print eval { ToPulsar::check_topic(pack('H*', $hex)); 1 } ? "ok\n" : "bad\n";
        }
    """
    assert PERL is not None
    done = subprocess.run(
        [PERL, "-I", str(PERL_DIR), "-MToPulsar", "-we", script],
        input="".join(f"{n.hex()}\n" for n in names).encode(), capture_output=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    expected = []
    for name in names:
        try:
            full_topic_name(name)
            expected.append("ok")
        except InvalidMessageError:
            expected.append("bad")
    answers = done.stdout.decode().splitlines()
    assert dict(zip(names, answers, strict=True)) == dict(zip(names, expected, strict=True))


def test_a_bad_topic_is_refused_before_it_is_sent(sock_path: Path, receiver: socket.socket) -> None:
    """``'my topic'`` was sent (exit 0) and discarded by the daemon as bad_topic."""
    cli = send_pl(sock_path, "my topic", "v")
    assert cli.returncode == 2
    assert cli.stderr == (
        "to_pulsar_send.pl: error: invalid topic 'my topic': the topic's own name must be "
        "non-empty, without whitespace or control characters\n"
    )
    died = perl("ToPulsar->new($ARGV[0])->send_any('a/b/c/d', 'v')", sock_path)
    assert died.stderr.decode().startswith("ToPulsar: invalid topic 'a/b/c/d': expected t, ")
    receiver.settimeout(0)
    with pytest.raises(BlockingIOError):
        receiver.recv(65536)  # nothing was sent


def test_queue_full_and_too_large(sock_path: Path, receiver: socket.socket) -> None:
    script = r"""
        my $tp = ToPulsar->new($ARGV[0], timeout => 0);
        my $n = 0;
        eval { $tp->send_any('t', 'x' x 100, '', 0) while ++$n < 100000 };
        print $n > 1 ? "filled\n" : "not filled\n", $@;
        # A new socket has its own send buffer: fill it too, until a send times out
        # (whether the kernel's queue length or the buffer bytes are the limit).
        $tp = ToPulsar->new($ARGV[0], timeout => 0.1);
        my $m = 0;
        eval { $tp->send_any('t', 'x' x 100) while ++$m < 100000 };
        print $@;
        eval { $tp->send_any('t', 'x' x (4 * 1024 * 1024)) };
        print $@;
    """
    lines = perl(script, sock_path).stdout.decode().splitlines()
    assert lines[0] == "filled"
    assert lines[1] == f"ToPulsar: daemon socket {sock_path} queue is full (timeout=0)"
    assert lines[2].endswith("queue stayed full for longer than the 0.1s timeout")
    assert lines[3].startswith("ToPulsar: message of 4194333 bytes is too large to send")


@pytest.mark.broker
def test_through_daemon_and_broker(broker: Broker, start_daemon) -> None:
    daemon = start_daemon(broker.url)
    topic = f"perl-sender-{uuid.uuid4().hex[:10]}"
    partition_keys = [0, 1, 2, 3, 5, 6, 7, 11, 4_294_967_295, -1]
    script = r"""
        my ($path, $topic, @pks) = @ARGV;
        my $tp = ToPulsar->new($path);
        $tp->send_any($topic, "any-$_", "key-$_", 1700000000000 + $_) for 0 .. 5;
        $tp->send_keyed($_, $topic, "pk:$_", "k$_") for @pks;
    """
    result = perl(script, daemon.socket_path, topic, *map(str, partition_keys))
    assert result.returncode == 0, result.stderr
    cli = send_pl(daemon.socket_path, topic, "from-script", "script-key", "6")
    assert cli.returncode == 0, cli.stderr
    total = 6 + len(partition_keys) + 1
    counters = daemon.wait_settled(total)
    assert counters.acked == total and counters.identity_holds()

    messages = consume(broker.url, f"persistent://public/default/{topic}", total)
    by_value = {m.value.decode(): m for m in messages}
    assert len(messages) == total and len(by_value) == total
    for i in range(6):
        assert by_value[f"any-{i}"].key == f"key-{i}"
        assert by_value[f"any-{i}"].event_time == 1_700_000_000_000 + i
    for pk in partition_keys:
        assert by_value[f"pk:{pk}"].key == f"k{pk}"
        assert by_value[f"pk:{pk}"].partition == (pk & 0xFFFFFFFF) % 4
    assert by_value["from-script"].key == "script-key"
    assert by_value["from-script"].partition == 2
