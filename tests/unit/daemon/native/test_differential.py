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
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pulsar_bruce.batch.batch_builder import _PyEntries, encode_key_field
from pulsar_bruce.input.stream_session import encode_flush_request, split_records_py
from pulsar_bruce.parse.datagram import parse_datagram_py
from to_pulsar.encoding import encode_any_partition, encode_message_record, encode_partition_key

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
