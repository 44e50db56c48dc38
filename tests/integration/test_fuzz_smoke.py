"""Fuzz, short form (issue 4, point 5): mutated datagrams at a running daemon on a real broker.

5,000 mutants (bit flips, truncations, extensions, random header fields, random
bytes, empty and oversized datagrams), each after a valid message.  The daemon
must stay up, count every datagram under the reason its own parser gives, ack
every valid one (mutants that happen to be valid included) and read back complete.
``bench/fuzz/run.py`` is the long form (100,000 mutants).
"""

from __future__ import annotations

import pytest

from bench.fuzz.campaign import fuzz

pytestmark = [pytest.mark.broker, pytest.mark.timeout(90)]


def test_mutated_datagrams_are_counted_and_valid_ones_all_arrive(broker, start_daemon) -> None:
    outcome = fuzz(start_daemon, broker.url, mutants=5_000, seed=4, timeout=45)
    print(outcome.report())
    assert outcome.ok, outcome.report()
