"""The one admission decision: its rule for each sender, and its C twin compared with it.

``model/admission.py`` is what every Python path asks (the intake for datagrams and
stream records, a numbered stream, a replay, a held datagram the disk refused);
``native/admission.c`` is what the compiled admitter asks.  Hypothesis runs both on the
same topic limits, sizes, charges and rooms, for every sender.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pulsar_bruce import reasons
from pulsar_bruce.model.admission import (
    ACCEPT,
    DATAGRAM,
    NUMBERED,
    REPLAY,
    SPILL,
    STREAM,
    WAIT,
    admission_py,
)
from pulsar_bruce.producer.partition_state import PyPartitionState
from pulsar_bruce.route.topic_state import PyTopicState

from tests.support.extension import load_extension, needs_extension

native = load_extension()
SENDERS = (DATAGRAM, STREAM, NUMBERED, REPLAY)
CAPACITY = 1000


def topic(max_message_bytes: int = 1 << 62, budget: int | None = None, partitions: int = 1):
    state = PyTopicState()
    state.max_message_bytes, state.rate_budget = max_message_bytes, budget
    state.attach(tuple(PyPartitionState(None, None) for _ in range(partitions)))  # type: ignore[arg-type]
    return state


def test_each_sender_meets_a_spent_rate_budget_its_own_way() -> None:
    spent = topic(budget=0)
    verdicts = [admission_py(spent, 10, 10, CAPACITY, CAPACITY, s) for s in SENDERS]
    assert verdicts == [reasons.RATE_LIMITED, reasons.RATE_LIMITED, WAIT, ACCEPT]


def test_each_sender_meets_full_memory_its_own_way() -> None:
    state = topic()
    verdicts = [admission_py(state, 10, 10, 9, CAPACITY, s) for s in SENDERS]
    assert verdicts == [SPILL, WAIT, WAIT, reasons.BUFFER_FULL]
    never_fits = [admission_py(state, 10, CAPACITY + 1, 9, CAPACITY, s) for s in SENDERS]
    assert never_fits == [SPILL, reasons.TOO_LARGE, reasons.TOO_LARGE, reasons.BUFFER_FULL]


def test_only_a_numbered_stream_waits_for_the_partition_count() -> None:
    unknown = topic(partitions=0)
    verdicts = [admission_py(unknown, 10, 10, CAPACITY, CAPACITY, s) for s in SENDERS]
    assert verdicts == [ACCEPT, ACCEPT, WAIT, ACCEPT]


def test_the_topics_size_limit_comes_first_and_no_topic_means_no_topic_limits() -> None:
    state = topic(max_message_bytes=10, budget=0, partitions=0)
    assert {admission_py(state, 11, 0, -1, CAPACITY, s) for s in SENDERS} == {reasons.TOO_LARGE}
    assert admission_py(None, 1 << 40, 5, 5, CAPACITY, REPLAY) == ACCEPT


limits = st.integers(-5, 2**63 - 1) | st.integers(-3, 50)
rooms = st.integers(-(2**63), 2**63 - 1) | st.integers(-3, 50)


@needs_extension
@settings(max_examples=800, deadline=None)
@given(
    st.none() | st.tuples(limits, st.none() | limits, st.integers(0, 2)),
    limits,
    limits,
    rooms,
    limits,
    st.sampled_from(SENDERS),
)
def test_the_compiled_decision_is_the_same(
    limits_: tuple[int, int | None, int] | None,
    size: int,
    charge: int,
    room: int,
    capacity: int,
    sender: int,
) -> None:
    assert native is not None
    if limits_ is None:
        python_state = compiled_state = None
    else:
        largest, budget, partitions = limits_
        python_state = topic(largest, budget, partitions)
        compiled_state = native.TopicState()
        compiled_state.max_message_bytes, compiled_state.rate_budget = largest, budget
        compiled_state.attach(
            tuple(native.PartitionState(native.Entries(), None) for _ in range(partitions))
        )
    expected = admission_py(python_state, size, charge, room, capacity, sender)
    assert native.admission(compiled_state, size, charge, room, capacity, sender) == expected
