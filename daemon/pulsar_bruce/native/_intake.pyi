# The whole contract between the compiled intake (native/*.c) and the Python side.  The C
# code reads no attribute of a Python object by name: it reads its own types below and calls
# only the callables an Admitter is constructed with.  mypy checks the Python side against
# this file (native/__init__.py re-exports the types for annotations); each type's
# pure-Python twin has the same public names (tests/unit/daemon/native/test_state.py).
from collections.abc import Callable
from typing import Any

#: (topic bytes, partition key or -1, timestamp, key, value offset, metadata fields)
Parsed = tuple[bytes, int, int, bytes, int, bytes]

def parse_datagram(data: bytes, /) -> Parsed | str: ...
def split_records(buffer: bytearray, offset: int, max_record_bytes: int, /) -> list[bytes]: ...
def stamp_sequence_ids(payload: bytes, first_id: int, count: int, /) -> bytes: ...
def admission(
    state: TopicState | None, size: int, charge: int, room: int, capacity: int, sender: int, /
) -> str: ...
def write_then_consume(
    journal_fd: int, data: bytes, sock_fd: int, count: int, /
) -> tuple[int, int]: ...

class TagRun:
    """``count`` consecutive messages of a batch that belong to ``tag`` (twin:
    model/confirmation.py _PyTagRun)."""

    count: int
    def __init__(self, tag: Any, count: int = 1) -> None: ...
    @property
    def tag(self) -> Any: ...

class Entries:
    """A batch's entries (twin: batch/batch_builder.py _PyEntries)."""

    count: int
    charged: int
    keys: dict[bytes, Any] | None
    tags: list[TagRun] | None
    @property
    def buffer(self) -> bytes: ...
    @property
    def size(self) -> int: ...
    def tail(self, start: int, /) -> bytes: ...
    def append(
        self, key_field: bytes, timestamp: int, data: bytes, value_offset: int, charge: int, /
    ) -> int: ...
    def take(self) -> bytes: ...

class PartitionState:
    """What the admitter knows of one partition's producer, kept current by the producer
    (twin: producer/partition_state.py PyPartitionState).  Limits beyond 2**63 - 1 are
    kept as 2**63 - 1."""

    ready: bool
    available: bool
    def __init__(self, batch: Entries, owner: Any) -> None: ...
    @property
    def batch(self) -> Entries: ...
    @property
    def owner(self) -> Any: ...
    @property
    def max_batch_bytes(self) -> int: ...
    @property
    def max_messages(self) -> int: ...
    @property
    def key_based(self) -> bool: ...
    def limits(self, max_batch_bytes: int, max_messages: int, key_based: bool, /) -> None: ...

class TopicState:
    """What the admitter knows of one topic, and the partition choice (twin:
    route/topic_state.py PyTopicState).  Limits and budgets beyond 2**63 - 1 are kept as
    2**63 - 1 (the configuration's limits stay far below)."""

    max_message_bytes: int
    rate_budget: int | None
    key_hash: Callable[[bytes], int] | None
    def __init__(self) -> None: ...
    @property
    def partitions(self) -> tuple[PartitionState, ...]: ...
    @property
    def round_robin(self) -> int: ...
    def attach(self, partitions: tuple[PartitionState, ...], /) -> None: ...
    def choose(self, partition_key: int, /) -> int: ...

class Admitter:
    """``Intake.admit`` for the common case; the rest goes to ``slow`` (``Intake.admit_py``).

    ``topics`` maps topic bytes to their state (a value that is no TopicState: admit_py).
    Before any other call-out, the messages admitted since the last one are told in one
    ``accepted(count, charge, tag)``.  ``headroom()``: the bytes memory can still take.
    ``seal(owner)`` seals a partition's open batch, ``opened(owner)`` says its first
    message went in (``owner``: the PartitionState's), ``tag_last(batch, tag)`` starts a
    confirmation run.
    """

    max_message_bytes: int
    def __init__(
        self,
        slow: Callable[..., bool],
        topics: dict[bytes, TopicState],
        *,
        accepted: Callable[[int, int, Any], object],
        headroom: Callable[[], int],
        seal: Callable[[Any], object],
        opened: Callable[[Any], object],
        tag_last: Callable[[Any, Any], object],
        encode_key_field: Callable[[bytes], bytes],
        entry_overhead: int,
        max_message_bytes: int,
    ) -> None: ...
    def admit(self, data: bytes, tag: Any = None, /) -> bool: ...
    def admit_records(
        self, records: list[bytes], start: int, tag: Any, stop_api_key: int, /
    ) -> int: ...
    @property
    def admitted_here(self) -> int: ...

class Receiver:
    def __init__(self, fd: int, max_datagram_bytes: int, *, nap_us: int = 0) -> None: ...
    @property
    def wake_fd(self) -> int: ...
    @property
    def running(self) -> bool: ...
    @property
    def error(self) -> int: ...
    @property
    def stats(self) -> tuple[int, int, int, int]: ...
    @property
    def read_bytes(self) -> int: ...
    @property
    def naps(self) -> int: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def take(self) -> list[bytes] | None: ...
    def read_now(self, limit: int, /) -> list[bytes] | None: ...
    peek: bool
