"""The daemon against a scripted fake broker: redirects, proxying, lost receipts, closed producers.

These are the broker behaviours a real broker cannot be made to show on demand
(see ``tests/support/fakebroker.py``).  Every test runs the real daemon process.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from pulsar_bruce.frame import pulsar_api_pb2 as pb

from tests.support.fakebroker import FakeBroker, Lookup, LookupAnswer
from tests.support.processes import Daemon, wait_for

pytestmark = pytest.mark.timeout(60)

FAST = ("--batch-max-delay-ms", "5")


@pytest.fixture
def fake_broker() -> Iterator[Callable[..., FakeBroker]]:
    """``fake_broker(**options)`` -> a started :class:`FakeBroker`; stopped at teardown."""
    started: list[FakeBroker] = []

    def start(**options: int) -> FakeBroker:
        broker = FakeBroker(**options).start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        assert broker.errors() == [], broker.errors()
        broker.stop()


def unique_topic(what: str) -> str:
    return f"fake-{what}-{uuid.uuid4().hex[:8]}"


def full_name(topic: str) -> str:
    return f"persistent://public/default/{topic}"


def send_values(daemon: Daemon, topic: str, values: list[bytes]) -> None:
    with daemon.sender() as sender:
        for value in values:
            sender.send(topic, value)


def nonzero(discarded: dict[str, int]) -> dict[str, int]:
    return {reason: n for reason, n in discarded.items() if n}


def acked(daemon: Daemon, count: int) -> bool:
    return daemon.counters().acked >= count


# -- lookups -------------------------------------------------------------------------------


def test_authoritative_redirect_is_followed(fake_broker, start_daemon):
    broker_b = fake_broker()
    broker_a = fake_broker()
    broker_a.lookup = LookupAnswer.redirect_to(broker_b.url, authoritative=True)
    daemon = start_daemon(broker_a.url, *FAST)
    topic = unique_topic("redirect")
    values = [f"r-{i}".encode() for i in range(20)]

    send_values(daemon, topic, values)

    counters = daemon.wait_settled(len(values))
    assert counters.acked == len(values)
    assert counters.identity_holds()
    assert broker_b.values() == values
    assert broker_a.messages() == []
    assert [(x.topic, x.authoritative) for x in broker_a.lookups()] == [(full_name(topic), False)]
    assert [(x.topic, x.authoritative) for x in broker_b.lookups()] == [(full_name(topic), True)]
    assert [r.topic for r in broker_b.producer_requests()] == [full_name(topic)]
    assert "PARTITIONED_METADATA" in broker_a.commands()  # metadata asks the service URL


def test_redirect_chain_longer_than_20_gives_up_and_retries(fake_broker, start_daemon):
    broker = fake_broker()
    broker.lookup = LookupAnswer.redirect_to(broker.url)  # to itself, forever
    daemon = start_daemon(broker.url, *FAST)
    topic = unique_topic("chain")

    send_values(daemon, topic, [b"stuck"])

    wait_for(lambda: "more than 20 redirects" in daemon.log(), 10, "the lookup to be given up")
    assert f"producer for {full_name(topic)} not connected" in daemon.log()
    wait_for(lambda: len(broker.lookups()) >= 22, 10, "the lookup to be retried")
    lookups = broker.lookups()
    # One attempt is 1 lookup + 20 followed redirects; the retry starts afresh.
    assert [x.authoritative for x in lookups[:22]] == [False] + [True] * 20 + [False]
    assert broker.producer_requests() == []
    counters = daemon.counters()
    assert (counters.received, counters.acked, counters.buffered) == (1, 0, 1)

    # The attempt was given up, not the message: once lookups answer, it is delivered.
    broker.lookup = LookupAnswer()
    counters = daemon.wait_settled(1, timeout=15)
    assert counters.acked == 1
    assert broker.values() == [b"stuck"]


def test_redirect_chain_of_exactly_20_is_followed(fake_broker, start_daemon):
    broker = fake_broker()

    def redirect_20_times(lookup: Lookup) -> LookupAnswer:
        if len(broker.lookups()) <= 20:
            return LookupAnswer.redirect_to(broker.url)
        return LookupAnswer()

    broker.lookup = redirect_20_times
    daemon = start_daemon(broker.url, *FAST)

    send_values(daemon, unique_topic("chain20"), [b"made it"])

    assert daemon.wait_settled(1).acked == 1
    assert len(broker.lookups()) == 21
    assert "redirects" not in daemon.log()


def test_proxy_through_service_url(fake_broker, start_daemon):
    owner = fake_broker()  # the broker that owns the topic; never contacted directly
    proxy = fake_broker()  # the service URL, acting as a proxy
    proxy.lookup = LookupAnswer(owner.url, proxy_through_service_url=True)
    daemon = start_daemon(proxy.url, *FAST)
    topic = unique_topic("proxy")
    values = [f"p-{i}".encode() for i in range(10)]

    send_values(daemon, topic, values)

    counters = daemon.wait_settled(len(values))
    assert counters.acked == len(values)
    assert proxy.values() == values
    assert owner.commands() == []
    connects = dict(proxy.connects())
    proxied = [conn for conn, c in connects.items() if c.HasField("proxy_to_broker_url")]
    assert len(proxied) == 1
    assert connects[proxied[0]].proxy_to_broker_url == f"127.0.0.1:{owner.port}"
    (request,) = proxy.producer_requests()
    assert request.conn == proxied[0]
    assert {m.conn for m in proxy.messages()} == {proxied[0]}


# -- producers and receipts ---------------------------------------------------------------------


def test_close_producer_recreates_it_with_the_same_name(fake_broker, start_daemon):
    broker = fake_broker()
    daemon = start_daemon(broker.url, *FAST, "--producer-name-prefix", "")  # broker names it
    topic = unique_topic("close")
    first = [f"a-{i}".encode() for i in range(3)]
    in_flight = [f"b-{i}".encode() for i in range(4)]
    after = [f"c-{i}".encode() for i in range(3)]

    send_values(daemon, topic, first)
    wait_for(lambda: acked(daemon, 3), 10, "the first messages to be acked")
    (created,) = broker.producer_requests()
    assert created.requested_name is None
    name = created.assigned_name

    broker.swallow_receipts()
    send_values(daemon, topic, in_flight)
    wait_for(lambda: len(broker.messages()) == 7, 10, "the in-flight messages to arrive")
    broker.release_receipts()
    assert broker.close_producer(full_name(topic)) == 1

    wait_for(lambda: len(broker.producer_requests()) == 2, 10, "the producer to be re-created")
    recreated = broker.producer_requests()[1]
    assert recreated.requested_name == name
    assert recreated.producer_id == created.producer_id
    send_values(daemon, topic, after)

    counters = daemon.wait_settled(10)
    assert counters.acked == 10
    assert counters.identity_holds()
    assert counters.possible_duplicates == len(in_flight)
    received = broker.messages()
    assert {m.producer_name for m in received} == {name}
    assert [m.value for m in received] == first + in_flight + in_flight + after
    assert [m.sequence_id for m in received] == [0, 1, 2, 3, 4, 5, 6, 3, 4, 5, 6, 7, 8, 9]


def test_closed_producer_follows_its_topic_to_another_broker(fake_broker, start_daemon):
    new_owner = fake_broker()
    broker = fake_broker()
    daemon = start_daemon(broker.url, *FAST)
    topic = unique_topic("moved")
    send_values(daemon, topic, [b"before"])
    wait_for(lambda: acked(daemon, 1), 10, "the first message to be acked")
    name = broker.producer_requests()[0].assigned_name

    broker.lookup = LookupAnswer(new_owner.url)  # the topic was unloaded and moved
    assert broker.close_producer(full_name(topic)) == 1
    wait_for(new_owner.producer_requests, 10, "the producer to be re-created on the new owner")
    send_values(daemon, topic, [b"after"])

    assert daemon.wait_settled(2).acked == 2
    assert new_owner.producer_requests()[0].requested_name == name
    assert [(m.value, m.sequence_id) for m in new_owner.messages()] == [(b"after", 1)]


def test_dropped_connection_resends_unacknowledged_batches_first(fake_broker, start_daemon):
    broker = fake_broker()
    daemon = start_daemon(broker.url, *FAST)
    topic = unique_topic("drop")
    lost = [f"lost-{i}".encode() for i in range(20)]
    new = [f"new-{i}".encode() for i in range(10)]

    send_values(daemon, topic, [b"warm-up"])
    wait_for(lambda: acked(daemon, 1), 10, "the warm-up message to be acked")
    broker.swallow_receipts()
    send_values(daemon, topic, lost)
    wait_for(lambda: len(broker.messages()) == 21, 10, "the unacknowledged sends to arrive")
    swallowed = [s for s in broker.sends() if s.receipt == "swallowed"]
    assert sum(s.num_messages for s in swallowed) == len(lost)
    assert daemon.counters().buffered == len(lost)

    # Reconnect with new messages already waiting behind the unacknowledged ones.
    broker.release_receipts()
    broker.hold_producers()
    assert broker.drop_connections() == 1
    wait_for(lambda: len(broker.producer_requests()) == 2, 10, "the producer to be re-created")
    send_values(daemon, topic, new)
    wait_for(lambda: daemon.counters().received == 31, 10, "the new messages to be received")
    broker.release_producers()

    counters = daemon.wait_settled(31)
    assert counters.acked == 31
    assert counters.identity_holds()
    assert counters.possible_duplicates == len(lost)
    reconnected = broker.producer_requests()[1].conn
    later = [s for s in broker.sends() if s.conn == reconnected]
    resent, fresh = later[: len(swallowed)], later[len(swallowed) :]
    assert [(s.sequence_id, s.highest_sequence_id, s.values) for s in resent] == [
        (s.sequence_id, s.highest_sequence_id, s.values) for s in swallowed
    ]
    assert [v for s in fresh for v in s.values] == new
    sequence_ids = [m.sequence_id for m in broker.messages() if m.conn == reconnected]
    assert sequence_ids == list(range(1, 31))  # the resent 1..20, then the new 21..30
    name = broker.producer_requests()[0].assigned_name
    assert {s.producer_name for s in broker.sends()} == {name}


def test_receipt_for_the_wrong_batch_drops_the_connection_and_resends(fake_broker, start_daemon):
    broker = fake_broker()
    daemon = start_daemon(broker.url, *FAST)
    topic = unique_topic("wrong")
    values = [f"w-{i}".encode() for i in range(10)]

    send_values(daemon, topic, [b"warm-up"])
    wait_for(lambda: acked(daemon, 1), 10, "the warm-up message to be acked")
    broker.wrong_receipts(1)
    send_values(daemon, topic, values)

    counters = daemon.wait_settled(11)
    assert counters.acked == 11
    assert counters.identity_holds()
    (wrong,) = [s for s in broker.sends() if s.receipt == "wrong"]
    assert counters.possible_duplicates >= wrong.num_messages
    assert "matches no pending batch" in daemon.log()
    assert len(broker.connects()) == 2  # the daemon dropped the connection and came back
    again = [s for s in broker.sends() if s.conn != wrong.conn]
    assert (again[0].sequence_id, again[0].values) == (wrong.sequence_id, wrong.values)
    delivered = [m.value for m in broker.messages() if m.conn != wrong.conn]
    assert [v for v in values if v not in delivered] == []  # nothing skipped


def test_transient_send_error_resends_on_a_new_connection(fake_broker, start_daemon):
    broker = fake_broker()
    daemon = start_daemon(broker.url, *FAST)
    topic = unique_topic("senderror")
    values = [f"t-{i}".encode() for i in range(10)]
    send_values(daemon, topic, [b"warm-up"])
    wait_for(lambda: acked(daemon, 1), 10, "the warm-up message to be acked")
    broker.fail_sends(pb.PersistenceError)

    send_values(daemon, topic, values)

    counters = daemon.wait_settled(11)
    assert counters.acked == 11
    assert nonzero(counters.discarded) == {}
    (failed,) = [s for s in broker.sends() if s.receipt == "error"]
    again = [s for s in broker.sends() if s.conn != failed.conn]
    assert (again[0].sequence_id, again[0].values) == (failed.sequence_id, failed.values)
    assert counters.possible_duplicates >= failed.num_messages


def test_permanent_send_error_discards_only_the_rejected_batch(fake_broker, start_daemon):
    broker = fake_broker()
    daemon = start_daemon(broker.url, *FAST, "--batch-max-messages", "2")
    topic = unique_topic("rejected")
    values = [f"r-{i}".encode() for i in range(10)]
    send_values(daemon, topic, [b"warm-up"])
    wait_for(lambda: acked(daemon, 1), 10, "the warm-up message to be acked")
    broker.fail_sends(pb.TopicTerminatedError)

    send_values(daemon, topic, values)

    counters = daemon.wait_settled(11)
    (failed,) = [s for s in broker.sends() if s.receipt == "error"]
    assert nonzero(counters.discarded) == {"broker_rejected": failed.num_messages}
    assert counters.acked == 11 - failed.num_messages
    assert counters.identity_holds()
    later = [s for s in broker.sends() if s.conn != failed.conn]
    assert all(s.sequence_id != failed.sequence_id for s in later)  # never sent again
    confirmed = {v for s in broker.sends() if s.receipt == "sent" for v in s.values}
    assert confirmed.isdisjoint(failed.values)
    assert confirmed | set(failed.values) == {b"warm-up", *values}


def test_ping_from_the_broker_is_answered(fake_broker, start_daemon):
    broker = fake_broker()
    daemon = start_daemon(broker.url, *FAST)
    send_values(daemon, unique_topic("ping"), [b"hello"])
    wait_for(lambda: acked(daemon, 1), 10, "a connection to exist")

    assert broker.ping() == 1
    wait_for(lambda: "PONG" in broker.commands(), 5, "the daemon to answer Ping with Pong")


def test_sequence_ids_continue_after_the_brokers_last_sequence_id(fake_broker, start_daemon):
    broker = fake_broker(last_sequence_id=41)
    daemon = start_daemon(broker.url, *FAST)

    send_values(daemon, unique_topic("seq"), [b"x", b"y", b"z"])

    assert daemon.wait_settled(3).acked == 3
    assert [m.sequence_id for m in broker.messages()] == [42, 43, 44]


def test_shutdown_discards_what_the_broker_never_confirmed(fake_broker, start_daemon):
    broker = fake_broker()
    daemon = start_daemon(broker.url, *FAST, "--shutdown-timeout-s", "0.3")
    topic = unique_topic("shutdown")
    send_values(daemon, topic, [b"ok"])
    wait_for(lambda: acked(daemon, 1), 10, "the first message to be acked")
    broker.swallow_receipts()
    send_values(daemon, topic, [b"lost-1", b"lost-2"])
    wait_for(lambda: len(broker.messages()) == 3, 10, "the unconfirmed sends to arrive")

    assert daemon.terminate(timeout=10) == 0
    assert "discarded 2 unacknowledged messages" in daemon.log()
    assert "stopped: received 3, acked 1, discarded 2" in daemon.log()


def test_small_messages_survive_a_small_broker_max_message_size(fake_broker, start_daemon):
    broker = fake_broker(max_message_size=16 * 1024)
    daemon = start_daemon(
        broker.url,
        "--compression", "none",
        "--batch-max-messages", "30",
        "--batch-max-delay-ms", "5000",
    )  # fmt: skip
    values = [bytes([65 + i % 26]) * 1000 for i in range(30)]  # 30 KB, each message fits

    send_values(daemon, unique_topic("maxsize"), values)

    counters = daemon.wait_settled(30)
    assert nonzero(counters.discarded) == {}
    assert counters.acked == 30
    assert broker.values() == values


def test_a_receipt_that_never_comes_makes_the_daemon_reconnect_and_resend(
    fake_broker, start_daemon
):
    broker = fake_broker()
    daemon = start_daemon(broker.url, *FAST, "--receipt-timeout-s", "0.5")
    topic = unique_topic("silent")
    broker.swallow_receipts(1)  # the broker stays up, answers pings, but loses this receipt

    send_values(daemon, topic, [b"only-once"])

    counters = daemon.wait_settled(1, timeout=20)
    assert counters.acked == 1
    assert counters.possible_duplicates == 1
    assert "no receipt from" in daemon.log()
    assert len(broker.producer_requests()) == 2  # re-created on a new connection


def test_a_partition_count_that_grows_is_picked_up(fake_broker, start_daemon):
    broker = fake_broker(partitions=2)
    daemon = start_daemon(broker.url, *FAST, "--metadata-refresh-s", "0.2")
    topic = unique_topic("grow")
    with daemon.sender() as sender:
        for key in range(4):
            sender.send(topic, b"before-%d" % key, partition_key=key)
    daemon.wait_settled(4)
    broker.partitions = 4  # the operator added partitions
    wait_for(
        lambda: len({r.topic for r in broker.producer_requests()}) == 4,
        10,
        "producers for the new partitions",
    )
    with daemon.sender() as sender:
        for key in range(4):
            sender.send(topic, b"after-%d" % key, partition_key=key)
    daemon.wait_settled(8)
    landed = {m.value: m.topic for m in broker.messages()}
    for key in range(4):
        assert landed[b"before-%d" % key] == f"{full_name(topic)}-partition-{key % 2}"
        assert landed[b"after-%d" % key] == f"{full_name(topic)}-partition-{key}"


# -- broker faults ---------------------------------------------------------------------------


def test_a_topic_refused_for_good_is_discarded_while_others_flow(fake_broker, start_daemon):
    broker = fake_broker()
    refused, fine = unique_topic("terminated"), unique_topic("fine")
    broker.refuse_producers[full_name(refused)] = pb.TopicTerminatedError
    daemon = start_daemon(broker.url, *FAST)
    with daemon.sender() as sender:
        for i in range(20):
            sender.send(refused, b"r%d" % i)
            sender.send(fine, b"f%d" % i)
    counters = daemon.wait_settled(40)
    assert counters.acked == 20
    assert counters.discarded["broker_rejected"] == 20
    assert "refused by the broker" in daemon.log()
    assert broker.values() == [b"f%d" % i for i in range(20)]


def test_a_retriable_producer_error_is_retried_until_it_clears(fake_broker, start_daemon):
    broker = fake_broker()
    topic = unique_topic("busy")
    broker.refuse_producers[full_name(topic)] = pb.ServiceNotReady
    daemon = start_daemon(broker.url, *FAST)
    send_values(daemon, topic, [b"patient"])
    wait_for(lambda: len(broker.producer_requests()) >= 2, 10, "a retry")
    assert daemon.counters().buffered == 1
    del broker.refuse_producers[full_name(topic)]
    assert daemon.wait_settled(1).acked == 1


def test_checksum_error_on_an_intact_batch_resends_it(fake_broker, start_daemon):
    broker = fake_broker()
    daemon = start_daemon(broker.url, *FAST)
    broker.fail_sends(pb.ChecksumError, 1)
    send_values(daemon, unique_topic("checksum"), [b"intact"])
    counters = daemon.wait_settled(1)
    assert counters.acked == 1 and counters.total_discarded == 0
    assert counters.possible_duplicates == 1


def test_send_timeout_discards_what_a_stuck_topic_holds(fake_broker, start_daemon):
    broker = fake_broker()
    daemon = start_daemon(broker.url, *FAST, "--send-timeout-s", "1", "--receipt-timeout-s", "30")
    broker.swallow_receipts()  # connected, answering pings, never confirming
    send_values(daemon, unique_topic("stuck"), [b"a", b"b", b"c"])
    counters = daemon.wait_settled(3, timeout=20)
    assert counters.discarded["send_timeout"] == 3 and counters.acked == 0
    assert "not acked within 1 s" in daemon.log()


def test_a_batch_written_too_often_is_retries_exhausted(fake_broker, start_daemon):
    broker = fake_broker()
    daemon = start_daemon(
        broker.url, *FAST, "--max-send-attempts", "2", "--receipt-timeout-s", "0.3"
    )
    broker.swallow_receipts()
    send_values(daemon, unique_topic("exhausted"), [b"x"])
    counters = daemon.wait_settled(1, timeout=20)
    assert counters.discarded["retries_exhausted"] == 1
    assert len([s for s in broker.sends() if s.values == (b"x",)]) == 2


def test_producer_names_are_ours_and_stable_across_restarts(fake_broker, start_daemon):
    broker = fake_broker()
    topic = unique_topic("stable")
    first = start_daemon(broker.url, *FAST, "--producer-name-prefix", "edge-7")
    send_values(first, topic, [b"one"])
    first.wait_settled(1)
    assert first.terminate() == 0
    second = start_daemon(broker.url, *FAST, "--producer-name-prefix", "edge-7")
    send_values(second, topic, [b"two"])
    second.wait_settled(1)
    requests = broker.producer_requests()
    assert [r.requested_name for r in requests] == ["edge-7", "edge-7"]
    assert {s.producer_name for s in broker.sends()} == {"edge-7"}


def test_messages_for_a_topic_that_does_not_exist_are_discarded_not_kept(
    fake_broker, start_daemon
):
    broker = fake_broker()
    missing, fine = unique_topic("missing"), unique_topic("present")
    broker.refuse_metadata[full_name(missing)] = pb.TopicNotFound
    daemon = start_daemon(broker.url, *FAST)
    with daemon.sender() as sender:
        for i in range(5):
            sender.send(missing, b"m%d" % i)
            sender.send(fine, b"f%d" % i)
    counters = daemon.wait_settled(10)
    assert counters.acked == 5 and counters.discarded["broker_rejected"] == 5
    assert "waiting messages discarded as broker_rejected" in daemon.log()
