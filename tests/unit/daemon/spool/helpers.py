"""What the spool tests share: a datagram record, the bodies of records read back."""

from __future__ import annotations

from pulsar_bruce.spool import records


def datagram(i: int) -> bytes:
    return records.encode(records.DATAGRAM, b"datagram-%d" % i)


def bodies(got: list[tuple[int, bytes]] | list[tuple[int, bytes, str]]) -> list[bytes]:
    return [record[1] for record in got]
