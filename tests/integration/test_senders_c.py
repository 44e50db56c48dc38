"""The C sender (examples/c): built with cc, checked byte for byte, then through daemon + broker."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from to_pulsar import InvalidMessageError, encode_any_partition, encode_partition_key
from to_pulsar.topics import full_topic_name

from tests.support.consume import consume
from tests.support.processes import ROOT, Broker
from tests.support.topic_names import topic_names

C_DIR = ROOT / "examples" / "c"
CFLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-O2"]

# Exercises the library API directly: encoders, the send path and its error codes.
CHECK_C = r"""
#define _POSIX_C_SOURCE 200809L
#include "to_pulsar.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char long_topic[] = "persistent://public/default/a-topic-name";
static const unsigned char bin_key[] = {0x00, 0xff, 0x10};
static const unsigned char bin_value[] = {'a', 0x00, 'b', 0xfe};

/* The same four messages, encoded (mode "encode") or sent (mode "send"). */
static long one_case(int i, struct to_pulsar *tp, unsigned char *buf, size_t size)
{
    switch (i) {
    case 0:
        return tp ? to_pulsar_send_any(tp, "t", "k", 1, "value", 5, 123)
                  : to_pulsar_encode_any(buf, size, "t", 1, "k", 1, "value", 5, 123);
    case 1:
        return tp ? to_pulsar_send_keyed(tp, (uint32_t)-1, "a/b/c", NULL, 0, "v\xc3\xa4lue", 6, 0)
                  : to_pulsar_encode_keyed(buf, size, (uint32_t)-1, "a/b/c", 5, NULL, 0,
                                           "v\xc3\xa4lue", 6, 0);
    case 2:
        return tp ? to_pulsar_send_any(tp, long_topic, bin_key, 3, bin_value, 4, -1)
                  : to_pulsar_encode_any(buf, size, long_topic, strlen(long_topic), bin_key, 3,
                                         bin_value, 4, -1);
    default:
        return tp ? to_pulsar_send_keyed(tp, 7, "t", "key", 3, NULL, 0, 1700000000000LL)
                  : to_pulsar_encode_keyed(buf, size, 7, "t", 1, "key", 3, NULL, 0,
                                           1700000000000LL);
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    static unsigned char buf[256];
    struct to_pulsar tp;
    long n;
    int i, rc;
    if (argc < 2)
        return 2;
    if (strcmp(argv[1], "encode") == 0) {
        for (i = 0; i < 4; i++) {
            n = one_case(i, NULL, buf, sizeof buf);
            for (long j = 0; j < n; j++)
                printf("%02x", buf[j]);
            printf("\n");
        }
        /* Invalid input and too small buffers are TO_PULSAR_ERR_INVALID. */
        printf("%ld %ld %ld %ld\n",
               to_pulsar_encode_any(buf, sizeof buf, "", 0, NULL, 0, "v", 1, 0),
               to_pulsar_encode_any(buf, 30, "t", 1, NULL, 0, "vv", 2, 0),
               to_pulsar_encode_any(buf, 31, "t", 1, NULL, 0, "vv", 2, 0),
               to_pulsar_encode_keyed(buf, sizeof buf, 1, "t", 1, NULL, 5, "v", 1, 0));
        printf("%zu %zu %zu %zu\n", to_pulsar_any_size(1, 0, 0), to_pulsar_keyed_size(1, 0, 0),
               to_pulsar_any_size(32768, 0, 0), to_pulsar_any_size(1, 0x7FFFFFFF, 0));
        return 0;
    }
    if (argc < 3)
        return 2;
    rc = to_pulsar_open(&tp, argv[2]);
    printf("open %d\n", rc);
    if (strcmp(argv[1], "send") == 0) {
        for (i = 0; i < 4; i++)
            printf("%ld\n", one_case(i, &tp, NULL, 0));
        printf("%d\n", to_pulsar_send_any(&tp, "", NULL, 0, "v", 1, 0));
    } else if (strcmp(argv[1], "missing") == 0) {
        printf("%d %s\n", tp.fd, to_pulsar_strerror(rc));
        printf("%d\n", to_pulsar_send_any(&tp, "t", NULL, 0, "v", 1, 0));
    } else if (strcmp(argv[1], "full") == 0) {
        double started;
        to_pulsar_set_timeout_ms(&tp, 0);
        for (i = 0; i < 100000; i++) {
            rc = to_pulsar_send_any(&tp, "t", NULL, 0, "xxxxxxxxxxxxxxxx", 16, 0);
            if (rc < 0)
                break;
        }
        printf("%d %d %s\n", i, rc, to_pulsar_strerror(rc));
        to_pulsar_set_timeout_ms(&tp, 100);
        started = now_s();
        rc = to_pulsar_send_any(&tp, "t", NULL, 0, "v", 1, 0);
        printf("%d %.3f\n", rc, now_s() - started);
    } else if (strcmp(argv[1], "toolarge") == 0) {
        size_t big = 4u << 20;
        char *value = calloc(big, 1);
        printf("%d %s\n", to_pulsar_send_any(&tp, "t", NULL, 0, value, big, 0),
               to_pulsar_strerror(TO_PULSAR_ERR_TOO_LARGE));
        printf("%d\n", to_pulsar_send_any(&tp, "t", NULL, 0, "ok", 2, 0));
        free(value);
    }
    to_pulsar_close(&tp);
    to_pulsar_close(&tp);
    printf("closed %d\n", to_pulsar_send_any(&tp, "t", NULL, 0, "v", 1, 0));
    return 0;
}
"""

ERR_INVALID, ERR_TOO_LARGE, ERR_UNAVAILABLE, ERR_AGAIN = -1, -2, -3, -4


# One topic name per line, hex-encoded; prints to_pulsar_check_topic()'s answer for each.
TOPICS_C = r"""
#include "to_pulsar.h"
#include <stdio.h>
#include <string.h>

int main(void)
{
    static char line[70000], name[35000];
    while (fgets(line, sizeof line, stdin) != NULL) {
        size_t n = strlen(line) / 2, i;
        unsigned int byte;
        for (i = 0; i < n; i++) {
            sscanf(line + 2 * i, "%2x", &byte);
            name[i] = (char)byte;
        }
        printf("%d\n", to_pulsar_check_topic(name, n));
    }
    return 0;
}
"""

ERR_BAD_TOPIC = -6


@dataclass
class Build:
    cli: Path
    check: Path
    topics: Path


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    cc = shutil.which("cc") or shutil.which(os.environ.get("CC", "gcc"))
    if cc is None:
        pytest.skip("no C compiler (cc) on PATH")
    out = tmp_path_factory.mktemp("c-sender")
    (out / "check.c").write_text(CHECK_C)

    def compile_(*args: str | Path) -> None:
        result = subprocess.run(
            [cc, *CFLAGS, "-I", str(C_DIR), *map(str, args)], capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr

    (out / "topics.c").write_text(TOPICS_C)
    compile_("-c", "-o", out / "to_pulsar.o", C_DIR / "to_pulsar.c")
    compile_("-c", "-o", out / "to_pulsar_topic.o", C_DIR / "to_pulsar_topic.c")
    objects = [out / "to_pulsar.o", out / "to_pulsar_topic.o"]
    compile_("-o", out / "to_pulsar_send", C_DIR / "to_pulsar_send.c", *objects)
    compile_("-o", out / "check", out / "check.c", *objects)
    compile_("-o", out / "topics", out / "topics.c", *objects)
    return Build(cli=out / "to_pulsar_send", check=out / "check", topics=out / "topics")


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=60)


CASES = [
    encode_any_partition("t", b"value", b"k", 123),
    encode_partition_key(-1, "a/b/c", "välue".encode()),
    encode_any_partition(
        "persistent://public/default/a-topic-name", b"a\x00b\xfe", b"\x00\xff\x10", -1
    ),
    encode_partition_key(7, "t", b"", b"key", 1_700_000_000_000),
]


def test_makefile_builds(tmp_path: Path) -> None:
    if shutil.which("make") is None or shutil.which("cc") is None:
        pytest.skip("make or cc not on PATH")
    result = run("make", "-C", C_DIR, f"BUILD_DIR={tmp_path}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "to_pulsar_send").is_file()
    assert (tmp_path / "libto_pulsar.a").is_file()
    # Built in the checkout (plain `make` there), each file it makes is ignored by git.
    if shutil.which("git") is not None and (ROOT / ".git").exists():
        for built in sorted(path.name for path in tmp_path.iterdir()):
            ignored = run("git", "-C", ROOT, "check-ignore", "-q", f"examples/c/{built}")
            assert ignored.returncode == 0, f"examples/c/{built} is not in .gitignore"


def test_encoder_matches_python(build: Build) -> None:
    result = run(build.check, "encode")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [bytes.fromhex(line) for line in lines[:4]] == CASES
    assert lines[4].split() == [str(ERR_INVALID), str(ERR_INVALID), "31", str(ERR_INVALID)]
    assert lines[5].split() == ["29", "33", "0", "0"]


def test_send_path_matches_python(build: Build, sock_path: Path, receiver: socket.socket) -> None:
    """send_any/send_keyed gather the datagram with sendmsg(): same bytes as the encoders."""
    result = run(build.check, "send", sock_path)
    assert result.stdout.splitlines() == [
        "open 0",
        "0",
        "0",
        "0",
        "0",
        str(ERR_INVALID),
        f"closed {ERR_INVALID}",
    ], result.stderr
    assert [receiver.recv(65536) for _ in CASES] == CASES


def test_cli_bytes_match_python(build: Build, sock_path: Path, receiver: socket.socket) -> None:
    before = time.time_ns() // 1_000_000
    for args in (["t", "hello", "k1"], ["a/b/c", "välue", "", "-1"], ["t", "v"]):
        result = run(build.cli, sock_path, *args)
        assert result.returncode == 0, result.stderr
    after = time.time_ns() // 1_000_000

    def timestamp(datagram: bytes, offset: int) -> int:
        value = int.from_bytes(datagram[offset : offset + 8], "big", signed=True)
        assert before <= value <= after
        return value

    first, second, third = (receiver.recv(65536) for _ in range(3))
    assert first == encode_any_partition("t", b"hello", b"k1", timestamp(first, 13))
    assert second == encode_partition_key(
        0xFFFFFFFF, "a/b/c", "välue".encode(), b"", timestamp(second, 21)
    )
    assert third == encode_any_partition("t", b"v", b"", timestamp(third, 13))


def test_error_codes(build: Build, sock_path: Path) -> None:
    result = run(build.check, "missing", sock_path)
    assert result.stdout.splitlines() == [
        f"open {ERR_UNAVAILABLE}",
        "-1 no daemon listening on the socket",
        str(ERR_INVALID),
        f"closed {ERR_INVALID}",
    ]
    # A stale socket file (a crashed daemon) is ECONNREFUSED: unavailable too.
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as stale:
        stale.bind(str(sock_path))
    assert run(build.check, "missing", sock_path).stdout.startswith(f"open {ERR_UNAVAILABLE}\n")

    cli = run(build.cli, sock_path.with_name("nope.sock"), "t", "v")
    assert cli.returncode == 1
    assert cli.stderr.startswith("to_pulsar_send: error: ")
    assert "no daemon listening" in cli.stderr and len(cli.stderr.splitlines()) == 1
    for bad in (["t"], ["t", "v", "k", "4294967296"], ["", "v"], ["t", "v", "k", "x"]):
        usage = run(build.cli, sock_path, *bad)
        assert usage.returncode == 2, (bad, usage.stderr)


def test_the_topic_check_is_the_daemons_rule(build: Build) -> None:
    """to_pulsar_check_topic() accepts exactly the names the daemon does (the Python
    sender's copy of its rule, itself held to the daemon's by a property test)."""
    names = topic_names()
    done = subprocess.run(
        [str(build.topics)], input="".join(f"{n.hex()}\n" for n in names),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    answers = [int(line) for line in done.stdout.splitlines()]
    expected = []
    for name in names:
        try:
            full_topic_name(name)
            expected.append(0)
        except InvalidMessageError:
            expected.append(ERR_BAD_TOPIC)
    assert dict(zip(names, answers, strict=True)) == dict(zip(names, expected, strict=True))


def test_a_bad_topic_is_refused_before_it_is_sent(
    build: Build, sock_path: Path, receiver: socket.socket
) -> None:
    """``'my topic'`` was sent (exit 0) and discarded by the daemon as bad_topic."""
    cli = run(build.cli, sock_path, "my topic", "v")
    assert cli.returncode == 2
    assert cli.stderr.startswith("to_pulsar_send: error: 'my topic': invalid topic: expected t, ")
    assert len(cli.stderr.splitlines()) == 1
    receiver.settimeout(0)
    with pytest.raises(BlockingIOError):
        receiver.recv(65536)  # nothing was sent


def test_queue_full_and_too_large(build: Build, sock_path: Path, receiver: socket.socket) -> None:
    full = run(build.check, "full", sock_path).stdout.splitlines()
    sent, rc, *text = full[1].split()
    assert int(sent) > 0 and int(rc) == ERR_AGAIN and "queue is full" in " ".join(text)
    rc, waited = full[2].split()
    assert int(rc) == ERR_AGAIN and 0.08 <= float(waited) < 5  # SO_SNDTIMEO of 100 ms

    while True:  # drain, then the next check sends to an empty queue
        receiver.setblocking(False)
        try:
            receiver.recv(65536)
        except BlockingIOError:
            break
    receiver.settimeout(5)
    large = run(build.check, "toolarge", sock_path).stdout.splitlines()
    assert large[1].split()[0] == str(ERR_TOO_LARGE) and "too large" in large[1]
    assert large[2] == "0"  # still usable afterwards
    assert receiver.recv(65536) == encode_any_partition("t", b"ok")


@pytest.mark.broker
def test_through_daemon_and_broker(build: Build, broker: Broker, start_daemon) -> None:
    daemon = start_daemon(broker.url)
    topic = f"c-sender-{uuid.uuid4().hex[:10]}"
    daemon.warm_up(topic, 4)  # partition keys land on key % 4 only once all 4 are ready
    any_values = [f"any-{i}" for i in range(6)]
    partition_keys = [0, 1, 2, 3, 5, 6, 7, 11, 4_294_967_295, -1]
    for i, value in enumerate(any_values):
        result = run(build.cli, daemon.socket_path, topic, value, f"key-{i}")
        assert result.returncode == 0, result.stderr
    for pk in partition_keys:
        result = run(build.cli, daemon.socket_path, topic, f"pk:{pk}", f"k{pk}", str(pk))
        assert result.returncode == 0, result.stderr
    total = len(any_values) + len(partition_keys)
    counters = daemon.wait_settled(1 + total)
    assert counters.acked == 1 + total and counters.identity_holds()

    messages = consume(broker.url, f"persistent://public/default/{topic}", 1 + total)
    messages = [m for m in messages if m.value != b"warm-up"]
    by_value = {m.value.decode(): m for m in messages}
    assert len(messages) == total and len(by_value) == total
    for i, value in enumerate(any_values):
        assert by_value[value].key == f"key-{i}"
        assert by_value[value].event_time > 1_600_000_000_000
    for pk in partition_keys:
        message = by_value[f"pk:{pk}"]
        assert message.key == f"k{pk}"
        assert message.partition == (pk & 0xFFFFFFFF) % 4, message
