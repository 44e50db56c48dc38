"""The daemon against a scripted fake broker: redirects, proxying, lost receipts, closed producers.

These are the broker behaviours a real broker cannot be made to show on demand
(see ``tests/support/fakebroker.py``).  Every test runs the real daemon process.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable, Iterator

import pytest
from pulsar_bruce.frame import pulsar_api_pb2 as pb

from tests.support.fakebroker import FakeBroker, Lookup, LookupAnswer, ProducerRequest, Sent
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


def send_alternating(daemon: Daemon, prefixes: dict[str, bytes], count: int) -> None:
    """``count`` messages to each topic, taking turns: ``prefix + index`` as the value."""
    with daemon.sender() as sender:
        for i in range(count):
            for topic, prefix in prefixes.items():
                sender.send(topic, b"%s%d" % (prefix, i))


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


def test_receipt_for_the_wrong_batch_recreates_the_producer_and_resends(fake_broker, start_daemon):
    """A receipt that matches no pending batch leaves the producer's state unknown: it is
    closed and re-created on the same connection, and everything unconfirmed is resent."""
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
    assert len(broker.connects()) == 1  # the connection stayed
    assert [(c, p) for c, p in broker.closes()] == [(wrong.conn, wrong.producer_id)]
    assert len(broker.producer_requests()) == 2
    again = [s for s in broker.sends() if s.sequence_id == wrong.sequence_id]
    assert [(s.values, s.receipt) for s in again] == [
        (wrong.values, "wrong"),
        (wrong.values, "sent"),
    ]
    delivered = {v for s in broker.sends() if s.receipt == "sent" for v in s.values}
    assert [v for v in values if v not in delivered] == []  # nothing skipped


def test_transient_send_error_recreates_the_producer_and_resends(fake_broker, start_daemon):
    """The Java client hands a transient SendError to the producer alone (ClientCnx
    .handleSendError); we close and re-create it on the same connection and resend."""
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
    assert failed.error_sequence_id == failed.highest_sequence_id
    again = [s for s in broker.sends() if s.sequence_id == failed.sequence_id]
    assert [(s.values, s.receipt) for s in again] == [
        (failed.values, "error"),
        (failed.values, "sent"),
    ]
    assert counters.possible_duplicates == failed.num_messages  # the batches behind it stood
    assert len(broker.connects()) == 1
    assert broker.closes() == [(failed.conn, failed.producer_id)]


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
    assert failed.error_sequence_id == failed.highest_sequence_id  # as the Java broker names it
    assert nonzero(counters.discarded) == {"broker_rejected": failed.num_messages}
    assert counters.acked == 11 - failed.num_messages
    assert counters.identity_holds()
    again = [s for s in broker.sends() if s.sequence_id == failed.sequence_id]
    assert again == [failed]  # never sent again
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
    assert len(broker.producer_requests()) == 2  # re-created ...
    assert len(broker.connects()) == 1  # ... on the same connection


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
    send_alternating(daemon, {refused: b"r", fine: b"f"}, 20)
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


def test_send_timeout_gives_up_what_a_stuck_topic_holds_as_unconfirmed(
    fake_broker, start_daemon
):
    """A user's bound (the default is none): written to a broker that never confirms, the
    messages are given up as ``unconfirmed`` (the broker may have them), never as lost."""
    broker = fake_broker()
    daemon = start_daemon(broker.url, *FAST, "--send-timeout-s", "1", "--receipt-timeout-s", "30")
    broker.swallow_receipts()  # connected, answering pings, never confirming
    send_values(daemon, unique_topic("stuck"), [b"a", b"b", b"c"])
    counters = daemon.wait_settled(3, timeout=20)
    assert counters.discarded["unconfirmed"] == 3 and counters.acked == 0
    assert counters.discarded["send_timeout"] == 0
    assert "not acked within 1 s" in daemon.log()


def test_a_batch_written_too_often_is_given_up_as_unconfirmed(fake_broker, start_daemon):
    broker = fake_broker()
    daemon = start_daemon(
        broker.url, *FAST, "--max-send-attempts", "2", "--receipt-timeout-s", "0.3"
    )
    broker.swallow_receipts()
    send_values(daemon, unique_topic("exhausted"), [b"x"])
    counters = daemon.wait_settled(1, timeout=20)
    # neither write was answered, so the broker may hold it: given up, not counted lost
    assert counters.discarded["unconfirmed"] == 1
    assert len([s for s in broker.sends() if s.values == (b"x",)]) == 2


def test_producer_names_are_ours_and_stable_across_restarts(fake_broker, start_daemon):
    broker = fake_broker()
    topic = unique_topic("stable")
    first = start_daemon(broker.url, *FAST, "--producer-name-prefix", "edge-7")
    send_values(first, topic, [b"one"])
    first.wait_settled(1)
    assert first.terminate() == 0
    second = start_daemon(broker.url, *FAST, "--producer-name-prefix", "edge-7", restart_of=first)
    send_values(second, topic, [b"two"])
    second.wait_settled(1)
    requests = broker.producer_requests()
    names = {r.requested_name for r in requests}
    assert len(requests) == 2 and len(names) == 1  # the same name after the restart
    [name] = names
    assert name.startswith(f"edge-7-{socket.gethostname()}-")  # the prefix, unique per host
    assert {s.producer_name for s in broker.sends()} == {name}


def test_messages_for_a_topic_that_does_not_exist_are_discarded_not_kept(fake_broker, start_daemon):
    broker = fake_broker()
    missing, fine = unique_topic("missing"), unique_topic("present")
    broker.refuse_metadata[full_name(missing)] = pb.TopicNotFound
    daemon = start_daemon(broker.url, *FAST)
    send_alternating(daemon, {missing: b"m", fine: b"f"}, 5)
    counters = daemon.wait_settled(10)
    assert counters.acked == 5 and counters.discarded["broker_rejected"] == 5
    assert "waiting messages discarded as broker_rejected" in daemon.log()


# -- send errors, as the Java broker answers them -------------------------------------------------


def test_a_failed_send_recreates_only_its_producer_on_the_shared_connection(
    fake_broker, start_daemon
):
    """Two topics share one connection; one's batch fails with PersistenceError while the
    other's batches wait for receipts (slow persisting).  The Java client re-creates just the
    failed producer (ClientCnx.handleSendError: "don't close this ctx, otherwise it will close
    all consumers and producers which use this ctx"); so do we, and the other topic resends
    nothing: 0 possible duplicates there, its producer never re-created."""
    broker = fake_broker()
    daemon = start_daemon(broker.url, *FAST)
    failing, bystander = unique_topic("failing"), unique_topic("bystander")
    send_values(daemon, failing, [b"warm-up"])
    send_values(daemon, bystander, [b"warm-up"])
    wait_for(lambda: acked(daemon, 2), 10, "the warm-up messages to be acked")
    waiting = [f"b-{i}".encode() for i in range(5)]
    broker.hold_receipts(full_name(bystander))
    send_values(daemon, bystander, waiting)

    def held() -> list[Sent]:
        return [s for s in broker.sends() if s.receipt == "held"]

    def requests(topic: str) -> list[ProducerRequest]:
        return [r for r in broker.producer_requests() if r.topic == full_name(topic)]

    wait_for(lambda: sum(s.num_messages for s in held()) == 5, 10, "the bystander's sends")
    broker.fail_sends(pb.PersistenceError, topic=full_name(failing))
    send_values(daemon, failing, [f"f-{i}".encode() for i in range(5)])
    wait_for(lambda: len(requests(failing)) == 2, 10, "the failed producer's re-creation")
    assert broker.release_held_receipts() == len(held())

    counters = daemon.wait_settled(12)
    assert counters.acked == 12 and nonzero(counters.discarded) == {}
    (failed,) = [s for s in broker.sends() if s.receipt == "error"]
    assert failed.topic == full_name(failing)
    assert counters.possible_duplicates == failed.num_messages  # all of them the failed batch's
    bystander_sends = [s for s in broker.sends() if s.topic == full_name(bystander)]
    assert [v for s in bystander_sends for v in s.values] == [b"warm-up", *waiting]  # once each
    assert len(requests(bystander)) == 1
    assert len(broker.connects()) == 1
    assert broker.closes() == [(failed.conn, failed.producer_id)]


def test_a_batch_over_the_topics_size_policy_is_discarded_exactly_once(fake_broker, start_daemon):
    """A topic's max-message-size policy below the broker's: the broker accepts the frame, then
    PersistentTopic.publishMessage fails the entry with NotAllowedException, answered with the
    batch's highest sequence id (Producer.MessagePublishContext.completed).  That batch, and
    only it, is discarded as broker_rejected, once; the producer stays as it is (the Java
    client's ProducerImpl.recoverNotAllowedError)."""
    broker = fake_broker()
    topic = unique_topic("policy")
    broker.topic_max_message_size[full_name(topic)] = 2000
    daemon = start_daemon(
        broker.url,
        "--compression", "none",
        "--batch-max-messages", "5",
        "--batch-max-delay-ms", "5000",
    )  # fmt: skip
    small = [f"s-{i}".encode() for i in range(5)]
    large = [bytes([65 + i]) * 500 for i in range(5)]  # 2.5 KB together
    tail = [f"t-{i}".encode() for i in range(5)]

    send_values(daemon, topic, small + large + tail)

    counters = daemon.wait_settled(15)
    assert nonzero(counters.discarded) == {"broker_rejected": 5}
    assert counters.acked == 10 and counters.identity_holds()
    first, failed, last = broker.sends()  # nothing written twice
    assert (failed.values, failed.receipt, failed.error) == (
        tuple(large),
        "error",
        pb.NotAllowedError,
    )
    assert failed.error_sequence_id == failed.highest_sequence_id == failed.sequence_id + 4
    assert (first.values, last.values) == (tuple(small), tuple(tail))
    assert broker.closes() == [] and len(broker.producer_requests()) == 1


def test_a_terminated_topic_discards_each_message_once_while_others_flow(fake_broker, start_daemon):
    """Every publish on a terminated topic fails with TopicTerminatedError and a new producer
    is refused with it (Producer.MessagePublishContext.completed, ServerCnx.handleProducer).
    Each message is discarded once as broker_rejected, none written twice; the other topic on
    the connection keeps flowing."""
    broker = fake_broker()
    ended, fine = unique_topic("ended"), unique_topic("fine")
    daemon = start_daemon(broker.url, *FAST)
    send_values(daemon, ended, [b"warm-up"])
    send_values(daemon, fine, [b"warm-up"])
    wait_for(lambda: acked(daemon, 2), 10, "the warm-up messages to be acked")
    broker.terminated.add(full_name(ended))

    send_alternating(daemon, {ended: b"e", fine: b"f"}, 20)

    counters = daemon.wait_settled(42)
    assert counters.acked == 22
    assert nonzero(counters.discarded) == {"broker_rejected": 20}
    assert counters.identity_holds()
    written = [v for s in broker.sends() if s.topic == full_name(ended) for v in s.values]
    assert len(written) == len(set(written))  # none written twice
    wait_for(lambda: "refused by the broker" in daemon.log(), 10, "the re-creation's refusal")
    fine_requests = [r for r in broker.producer_requests() if r.topic == full_name(fine)]
    assert len(fine_requests) == 1 and len(broker.connects()) == 1


def test_a_producer_creation_timeout_closes_it_before_retrying(
    fake_broker, start_daemon, tmp_path, monkeypatch
):
    """While a Producer request is still pending, the Java broker answers another one for the
    same id with ServiceNotReady (ServerCnx.handleProducer), and closing it cancels it
    (ServerCnx.handleCloseProducer).  So after a creation timeout the Java client
    (ProducerImpl.connectionOpened) and the Go client (producer_partition.go grabCnx) send
    CloseProducer for that id before retrying; so do we."""
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(
        "from pulsar_bruce.connection import broker_connection\n"
        "broker_connection.REQUEST_TIMEOUT_S = 0.5\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(inject))
    broker = fake_broker()
    broker.hold_producers()
    daemon = start_daemon(broker.url, *FAST)

    send_values(daemon, unique_topic("slow-create"), [b"patient"])
    wait_for(lambda: len(broker.producer_requests()) >= 2, 10, "a retried Producer request")
    broker.release_producers()

    assert daemon.wait_settled(1).acked == 1
    requests = broker.producer_requests()
    creations = [c for c in broker.commands() if c in ("PRODUCER", "CLOSE_PRODUCER")]
    assert creations == ["PRODUCER", "CLOSE_PRODUCER"] * (len(requests) - 1) + ["PRODUCER"]
    assert {p for _, p in broker.closes()} == {requests[0].producer_id}
    assert "ServiceNotReady" not in daemon.log()
    assert len(broker.messages()) == 1
