"""The compiled intake's state API against its pure-Python twins, and ``_intake.pyi`` as
the whole contract.

The admitter reads only ``TopicState`` and ``PartitionState`` (and the batch's ``Entries``
and ``TagRun``); the Python side keeps them current through their declared members.  Here
both implementations of the partition choice go through the same random operations, each
twin has exactly the public names the stub declares, and so has the extension.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pulsar_bruce.batch.batch_builder import _PyEntries
from pulsar_bruce.model.confirmation import _PyTagRun
from pulsar_bruce.model.ledger import Ledger
from pulsar_bruce.native import compiled
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer
from pulsar_bruce.producer.partition_state import PyPartitionState
from pulsar_bruce.route.appender import Appender
from pulsar_bruce.route.intake import Intake
from pulsar_bruce.route.outcomes import Outcomes
from pulsar_bruce.route.registry import TopicRegistry
from pulsar_bruce.route.topic_state import PyTopicState
from pulsar_bruce.spool.policy import SpoolPolicy
from to_pulsar.encoding import encode_any_partition, encode_partition_key

from tests.support.extension import load_extension, needs_extension

STUB = Path(__file__).resolve().parents[4] / "daemon" / "pulsar_bruce" / "native" / "_intake.pyi"

#: Each compiled type and its pure-Python twin.
TWINS = {
    "TagRun": _PyTagRun,
    "Entries": _PyEntries,
    "PartitionState": PyPartitionState,
    "TopicState": PyTopicState,
}


native = load_extension()


def declared() -> dict[str, set[str]]:
    """The stub's public names: each class's members, and (under "") the module's."""
    tree = ast.parse(STUB.read_text())
    names: dict[str, set[str]] = {"": set()}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members = names[node.name] = set()
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and not item.name.startswith("_"):
                    members.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    members.add(item.target.id)
            names[""].add(node.name)
        elif isinstance(node, ast.FunctionDef):
            names[""].add(node.name)
    return names


def public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def test_each_twin_has_exactly_the_names_the_stub_declares() -> None:
    stub = declared()
    for name, twin in TWINS.items():
        assert public(twin) == stub[name], name


@needs_extension
def test_the_extension_has_exactly_the_names_the_stub_declares() -> None:
    """``_intake.pyi`` is the whole contract: nothing compiled is undeclared, or the reverse."""
    stub = declared()
    assert {name for name in vars(native) if not name.startswith("_")} == stub[""]
    for name in stub[""] - {"admission", "parse_datagram", "split_records",
                            "stamp_sequence_ids", "write_then_consume"}:  # fmt: skip
        assert public(getattr(native, name)) == stub[name], name


def _states(count: int, compiled_types: bool) -> tuple[object, list[object]]:
    assert native is not None
    if compiled_types:
        partitions = [native.PartitionState(native.Entries(), i) for i in range(count)]
        topic = native.TopicState()
    else:
        partitions = [PyPartitionState(_PyEntries(), i) for i in range(count)]  # type: ignore[arg-type]
        topic = PyTopicState()
    return topic, partitions


#: AnyPartition (-1) and PartitionKey values, the largest a datagram carries included.
PARTITION_KEYS = [-1, -1, 0, 1, 5, 2**31 - 1, 2**32 - 1]
operations = st.lists(
    st.tuples(st.just("ready"), st.integers(0, 5), st.booleans())
    | st.tuples(st.just("available"), st.integers(0, 5), st.booleans())
    | st.tuples(st.just("append"), st.integers(0, 5), st.just(True))
    | st.tuples(st.just("take"), st.integers(0, 5), st.just(True))
    | st.tuples(st.just("choose"), st.sampled_from(PARTITION_KEYS), st.just(True))
    | st.tuples(st.just("attach"), st.integers(1, 3), st.just(True)),
    max_size=60,
)


def _run(topic: object, partitions: list[object], count: int, steps: list[object]) -> list[object]:
    """The same steps on one implementation: what each choice returned, and the position."""
    attached = 0
    seen: list[object] = []
    for what, number, flag in steps:  # type: ignore[misc]
        if what == "attach":
            more = partitions[attached : attached + number]
            topic.attach(tuple(more))  # type: ignore[attr-defined]
            attached += len(more)
        elif what == "choose":
            try:
                seen.append(topic.choose(number))  # type: ignore[attr-defined]
            except ValueError as error:
                seen.append(str(error))
            seen.append(topic.round_robin)  # type: ignore[attr-defined]
        else:
            state = partitions[number % count]
            if what in ("ready", "available"):
                setattr(state, what, flag)
            elif what == "append":
                state.batch.append(b"", 0, b"v", 0, 10)  # type: ignore[attr-defined]
            else:
                state.batch.take()  # type: ignore[attr-defined]
    return seen


@needs_extension
@settings(max_examples=400, deadline=None)
@given(st.integers(1, 6), operations)
def test_both_partition_choices_choose_the_same(count: int, steps: list[object]) -> None:
    """Round-robin that stays within a batch, PartitionKey with failover, partitions added
    later, readiness and availability changing in between: the same choices."""
    results = [_run(*_states(count, compiled_types), count, steps) for compiled_types in (1, 0)]
    assert results[0] == results[1]


@needs_extension
def test_both_states_keep_limits_and_budgets_alike() -> None:
    assert native is not None
    for topic in (native.TopicState(), PyTopicState()):
        assert (topic.rate_budget, topic.max_message_bytes, topic.key_hash) == (None, 1 << 62, None)
        assert (topic.partitions, topic.round_robin) == ((), -1)
        topic.rate_budget, topic.max_message_bytes, topic.key_hash = 5, 100, len
        assert (topic.rate_budget, topic.max_message_bytes, topic.key_hash) == (5, 100, len)
        topic.rate_budget = None
        assert topic.rate_budget is None
    compiled_state = native.PartitionState(native.Entries(), "owner")
    python_state = PyPartitionState(_PyEntries(), "owner")  # type: ignore[arg-type]
    for state in (compiled_state, python_state):
        assert (state.ready, state.available, state.owner) == (False, True, "owner")
        state.limits(2048, 7, 1)
        assert (state.max_batch_bytes, state.max_messages, state.key_based) == (2048, 7, True)
        state.limits(1 << 70, 1, 0)  # beyond int64: kept as its largest value
        assert (state.max_batch_bytes, state.key_based) == ((1 << 63) - 1, False)
    with pytest.raises(TypeError):
        native.TopicState().attach((python_state,))  # the admitter reads only its own type


class _Sealed:
    """The edge: each sealed batch's (partition, count)."""

    def __init__(self) -> None:
        self.sealed: list[tuple[int, int]] = []

    def batch_sealed(self, producer: PartitionProducer) -> None:
        self.sealed += [(producer.partition, batch.count) for batch in producer.pending]
        producer.pending.clear()


def _routed(changes: str, python_path: bool) -> tuple[list[tuple[int, int]], int]:
    """Keyed and round-robin messages into two partitions, with the producers' state changed
    after the topic was routed, the way the edge changes it: the sealed batches, and how
    many messages the compiled admitter took."""
    ledger = Ledger()
    registry = TopicRegistry()
    events, appender = _Sealed(), Appender()
    intake = Intake(
        registry, appender, ledger, SpoolPolicy(ledger, 1 << 30), Outcomes(ledger),
        max_message_bytes=1 << 20,
    )  # fmt: skip
    topic = registry.lookup(b"t")
    assert topic is not None
    producers = [PartitionProducer(f"t-partition-{i}", i, i + 1, BatchPolicy()) for i in (0, 1)]
    topic.attach(producers)
    for producer in producers:
        producer.on_registered(producer.topic, -1)  # ready, available, limits from the policy
    if changes == "unavailable":
        producers[0].on_disconnected()
        producers[0].available = False  # (Availability.unreachable)
    elif changes == "smaller batches":
        producers[0].set_policy(BatchPolicy(max_messages=5))
        producers[1].limit_batch_bytes(200)
    admit = intake.admit_py if python_path else intake.admit
    for index in range(12):
        admit(encode_partition_key(index % 3, "t", b"v" * 40))
        admit(encode_any_partition("t", b"w" * 40))
        for producer in appender.take_batches()[1]:
            events.batch_sealed(producer)
    for producer in producers:
        if producer.seal():
            events.batch_sealed(producer)
    return events.sealed, intake.admitted_here


@pytest.mark.parametrize("changes", ["none", "unavailable", "smaller batches"])
def test_the_admitter_sees_the_state_the_producers_change(changes: str) -> None:
    """What the producers change after routing (readiness, availability, batching limits)
    reaches the compiled admitter through their PartitionState: it routes and seals as
    admit_py does (the Python twins run the same in the PULSAR_BRUCE_INTAKE=python pass)."""
    sealed, admitted_here = _routed(changes, python_path=False)
    assert (sealed, 0) == (_routed(changes, python_path=True)[0], 0)
    assert sum(count for _, count in sealed) == 24
    if changes == "unavailable":
        assert {partition for partition, _ in sealed} == {1}  # failed over, round-robin too
    if changes == "smaller batches":
        assert max(count for partition, count in sealed if partition == 0) == 5
        assert max(count for partition, count in sealed if partition == 1) < 5  # 200 bytes
    if compiled is not None:
        assert admitted_here == 24  # every one taken by the compiled admitter
