"""The compiled intake against its pure-Python twin: the same inputs, the same bytes.

Rule: the pure-Python intake stays the fallback and behaves identically.  These
tests load the extension directly (they run in both passes of ``make test``) and
skip only where it was not built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pulsar_bruce.batch.batch_builder import _PyEntries, encode_key_field
from pulsar_bruce.input.stream_session import encode_flush_request, split_records_py
from pulsar_bruce.parse.datagram import parse_datagram_py
from to_pulsar.encoding import encode_any_partition, encode_message_record, encode_partition_key

from tests.support.any_topic import to_any_topic
from tests.support.extension import load_extension, needs_extension

ROOT = Path(__file__).resolve().parents[4]


native = load_extension()
pytestmark = needs_extension

topics = st.sampled_from(["t", "persistent://public/default/orders", "x" * 300])
keys = st.binary(max_size=40) | st.sampled_from([b"", b"\xff\xfe", "ключ".encode()])
stamps = st.sampled_from([0, -1, 1, 127, 128, 1_700_000_000_000, 2**63 - 1, -(2**63)])
texts = st.text(max_size=20)


@st.composite
def datagrams(draw: st.DrawFn) -> bytes:
    """Valid datagrams of all three formats, then maybe truncated, extended or bit-flipped."""
    topic, value, key, stamp = draw(topics), draw(st.binary(max_size=300)), draw(keys), draw(stamps)
    kind = draw(st.sampled_from(["any", "keyed", "record"]))
    if kind == "any":
        data = encode_any_partition(topic, value, key, max(stamp, 0))
    elif kind == "keyed":
        partition_key = draw(st.integers(0, 2**31 - 1))
        data = encode_partition_key(partition_key, topic, value, key, max(stamp, 0))
    else:
        properties = draw(st.dictionaries(texts, texts, max_size=4))
        partition = draw(st.none() | st.integers(0, 2**31 - 1))
        data = encode_message_record(topic, value, key, max(stamp, 0), partition, properties)
    data = bytearray(data)
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(data) - 1))
        data[at] = draw(st.integers(0, 255))
    cut = draw(st.integers(0, len(data)))
    return bytes(data[:cut]) if draw(st.booleans()) else bytes(data) + draw(st.binary(max_size=3))


@settings(max_examples=600, deadline=None)
@given(datagrams() | st.binary(max_size=64))
def test_both_parsers_give_the_same_result_or_reason(data: bytes) -> None:
    assert native is not None
    assert native.parse_datagram(data) == parse_datagram_py(data)


def test_the_parser_compares_on_the_edges_of_every_field() -> None:
    """Sizes that run exactly to the end, one short, one over; signed and unsigned fields."""
    assert native is not None
    base = encode_message_record("topic", b"value", b"key", 5, 2**31 - 1, {"a": "b", "é": ""})
    for data in (base, encode_partition_key(2**31 - 1, "t", b"v")):
        for cut in range(len(data) + 1):
            head = data[:cut]
            for patched in (head, (len(head)).to_bytes(4, "big") + head[4:]):
                assert native.parse_datagram(patched) == parse_datagram_py(patched)
    record = encode_message_record("t", b"v", properties={"n": "v"})
    bad_utf8 = record.replace(b"\x00\x01n", b"\x00\x01\xff")  # a property name not UTF-8
    assert native.parse_datagram(bad_utf8) == parse_datagram_py(bad_utf8) == "malformed"


def _split(split: object, buffer: bytearray, offset: int, limit: int) -> object:
    try:
        return split(buffer, offset, limit)  # type: ignore[operator]
    except ValueError as exc:
        return ("ValueError", str(exc))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(datagrams() | st.integers(0, 2**40).map(encode_flush_request), max_size=8),
    st.binary(max_size=12),
    st.integers(0, 20),
    st.sampled_from([8, 40, 300, 1 << 20]),
)
def test_both_record_splitters_split_the_same(
    records: list[bytes], tail: bytes, offset: int, limit: int
) -> None:
    """Records back to back, then a partial or garbage tail, from any offset."""
    assert native is not None
    buffer = bytearray(b"".join(records) + tail)
    offset = min(offset, len(buffer))
    compiled = _split(native.split_records, buffer, offset, limit)
    assert compiled == _split(split_records_py, buffer, offset, limit)


appends = st.tuples(
    keys.map(encode_key_field),
    stamps,
    st.binary(max_size=5000),
    st.integers(0, 40),
    st.integers(0, 10_000),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(appends | st.just("take"), max_size=40))
def test_both_entry_buffers_build_the_same_batch(operations: list[object]) -> None:
    assert native is not None
    compiled, python = native.Entries(), _PyEntries()
    for operation in operations:
        if operation == "take":
            assert compiled.take() == python.take()
        else:
            key_field, stamp, data, offset, charge = operation  # type: ignore[misc]
            offset = min(offset, len(data))
            grown = compiled.append(key_field, stamp, data, offset, charge)
            assert grown == python.append(key_field, stamp, data, offset, charge)
        assert (compiled.count, compiled.charged) == (python.count, python.charged)
        assert compiled.buffer == bytes(python.buffer)


def _trace(seed: int, intake: str) -> dict[str, object]:
    env = {**os.environ, "PULSAR_BRUCE_INTAKE": intake}
    out = subprocess.run(
        [sys.executable, "-m", "tests.support.intake_trace", str(seed)],
        cwd=ROOT, env=env, capture_output=True, check=True, timeout=120,
    )  # fmt: skip
    return json.loads(out.stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize("seed", [1, 2])
def test_the_whole_intake_accepts_batches_frames_and_discards_the_same(seed: int) -> None:
    """Thousands of random and fuzzed datagrams and stream records through the whole
    sans-IO intake, once per intake in a fresh interpreter: identical traces."""
    compiled, python = _trace(seed, "compiled"), _trace(seed, "python")
    assert (compiled.pop("intake"), python.pop("intake")) == ("compiled", "python")
    in_c = compiled.pop("admitted_in_c")
    assert python.pop("admitted_in_c") == 0
    assert compiled == python
    assert in_c > 500  # most accepted messages took the compiled path, the rest admit_py
    rejects = set(compiled["rejects"])  # type: ignore[arg-type]
    assert {"malformed", "too_large", "bad_topic", "buffer_full", "backpressure"} <= rejects
    assert len(compiled["frames"]) > 100  # type: ignore[arg-type]


# -- the sequenced path (route/sequenced.py) ------------------------------------------------

seq_topics = st.sampled_from(["plain", "keyed", "limited", "waiting", "bad topic"])


@st.composite
def numbered_records(draw: st.DrawFn) -> bytes:
    """Stream records of a numbered stream: all three formats, sometimes damaged."""
    topic, value, key = draw(seq_topics), draw(st.binary(max_size=600)), draw(keys)
    kind = draw(st.sampled_from(["any", "keyed", "record", "flush"]))
    if kind == "flush":
        return encode_flush_request(draw(st.integers(0, 2**40)))
    partition_key = draw(st.integers(0, 2**31 - 1))
    partition = draw(st.none() | st.integers(0, 2**31 - 1))
    encode = {
        "any": lambda name: encode_any_partition(name, value, key),
        "keyed": lambda name: encode_partition_key(partition_key, name, value, key),
        "record": lambda name: encode_message_record(name, value, key, 0, partition, {"p": "v"}),
    }[kind]
    data = to_any_topic(topic, encode)
    if draw(st.integers(0, 9)) == 0:  # truncated
        data = data[: draw(st.integers(0, len(data)))]
    return data


class Worker:
    """``tests.support.sequenced_trace`` running under one intake: a workload in, a trace out."""

    def __init__(self, intake: str):
        env = {**os.environ, "PULSAR_BRUCE_INTAKE": intake}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.sequenced_trace"], cwd=ROOT, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert json.loads(self.readline()) == {"intake": intake}

    def readline(self) -> str:
        out: IO[str] | None = self.process.stdout
        assert out is not None
        line = out.readline()
        assert line, "the worker ended"
        return line

    def trace(self, workload: dict[str, object]) -> dict[str, object]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(workload) + "\n")
        self.process.stdin.flush()
        return json.loads(self.readline())  # type: ignore[no-any-return]

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def workers() -> Iterator[tuple[Worker, Worker]]:
    compiled, python = Worker("compiled"), Worker("python")
    yield compiled, python
    compiled.close()
    python.close()


@settings(max_examples=150, deadline=None)
@given(
    st.lists(numbered_records(), max_size=30),
    st.sampled_from([300, 1500, 1 << 20]),
    st.sampled_from([1, 4, 1000]),
)
def test_a_numbered_stream_takes_batches_ids_frames_and_refusals_the_same(
    workers: tuple[Worker, Worker], records: list[bytes], memory: int, budget: int
) -> None:
    """The sequenced sender's records through each intake (its parser, topic and partition
    state, entry buffers, id stamping), backpressure and relief included: identical traces."""
    workload = {"records": [record.hex() for record in records], "memory": memory,
                "budget": budget}  # fmt: skip
    compiled, python = workers
    assert compiled.trace(workload) == python.trace(workload)


def test_the_numbered_stream_workload_reaches_every_verdict(
    workers: tuple[Worker, Worker],
) -> None:
    """The comparison above can fail: its workloads wait, refuse and take."""
    big = encode_any_partition("limited", b"x" * 400)
    bad = to_any_topic("bad topic", lambda name: encode_any_partition(name, b"b"))
    records = [encode_any_partition("waiting", b"w"), encode_any_partition("plain", b"p" * 900),
               big, bad, encode_flush_request(1),
               *(encode_partition_key(i, "limited", b"r") for i in range(3))]  # fmt: skip
    workload = {"records": [record.hex() for record in records], "memory": 1500, "budget": 1}
    trace = workers[1].trace(workload)
    assert trace["rejects"] == ["too_large", "bad_topic"]
    assert trace["stops"][0] == 0  # "waiting" has no partitions yet: relief, then taken
    assert len(trace["batches"]) == 5  # type: ignore[arg-type]
    assert trace["position"] == len(records) - 1  # every record but the flush request
