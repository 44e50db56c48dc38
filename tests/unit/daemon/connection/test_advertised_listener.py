"""``--advertised-listener NAME``: every lookup names the listener whose address to answer with.

A Java broker configured with several ``advertisedListeners`` (e.g. ``internal``
and ``external`` addresses) answers a ``CommandLookupTopic`` carrying
``advertised_listener_name`` with that listener's URL, and without one with the
listener the connection came in on (pulsar-broker ``ServerCnx.handleLookup``); a
name it does not have fails the lookup with "the broker do not have NAME
listener" (``NamespaceService``).  The Java client sends its ``listenerName`` in
every lookup (``Commands.newLookup``).  The fake broker models that.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from pulsar_bruce.config import ConfigError, load_config
from pulsar_bruce.config.model import OPTIONS_BY_NAME
from pulsar_bruce.connection.pool import BrokerAddress, ConnectionPool, TopicLookupError
from pulsar_bruce.frame import commands
from pulsar_bruce.frame.codec import FrameDecoder

from tests.support.fakebroker import FakeBroker

TOPIC = "persistent://public/default/listened"


# -- the option -----------------------------------------------------------------------------------


def test_the_option_is_a_flag_an_environment_variable_and_a_file_key(tmp_path: Path) -> None:
    option = OPTIONS_BY_NAME["advertised_listener"]
    assert option.flag == "--advertised-listener"
    assert option.env == "PULSAR_BRUCE_ADVERTISED_LISTENER"
    assert load_config({}, {}).advertised_listener == ""  # default: the broker's default listener
    assert load_config({"advertised_listener": "internal"}, {}).advertised_listener == "internal"
    env = {"PULSAR_BRUCE_ADVERTISED_LISTENER": "external"}
    assert load_config({}, env).advertised_listener == "external"
    config_file = tmp_path / "bruce.toml"
    config_file.write_text('advertised_listener = "internal"\n')
    assert load_config({}, {}, str(config_file)).advertised_listener == "internal"


def test_a_listener_that_is_not_text_is_a_config_error(tmp_path: Path) -> None:
    config_file = tmp_path / "bruce.toml"
    config_file.write_text("advertised_listener = 7\n")
    with pytest.raises(ConfigError, match="advertised_listener"):
        load_config({}, {}, str(config_file))


# -- the lookup command ---------------------------------------------------------------------------


def test_the_lookup_carries_the_listener_name_only_when_there_is_one() -> None:
    (named,) = FrameDecoder().feed(commands.lookup(TOPIC, 3, True, "internal"))
    assert named.command.lookupTopic.advertised_listener_name == "internal"
    for unnamed in (commands.lookup(TOPIC, 3, True), commands.lookup(TOPIC, 3, True, "")):
        (frame,) = FrameDecoder().feed(unnamed)
        assert not frame.command.lookupTopic.HasField("advertised_listener_name")


# -- against the fake broker ----------------------------------------------------------------------


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    started = FakeBroker().start()
    started.listeners = {"internal": "pulsar://10.0.0.7:6650"}
    yield started
    assert started.errors() == [], started.errors()
    started.stop()


def _lookup(pool: ConnectionPool) -> BrokerAddress:
    async def run() -> BrokerAddress:
        try:
            return await pool.lookup(TOPIC)
        finally:
            pool.close_all()

    return asyncio.run(run())


def test_every_lookup_names_the_listener_and_gets_its_address(broker: FakeBroker) -> None:
    address = _lookup(ConnectionPool(broker.url, advertised_listener="internal"))
    assert address == BrokerAddress("pulsar://10.0.0.7:6650")
    assert [(x.topic, x.listener) for x in broker.lookups()] == [(TOPIC, "internal")]


def test_without_a_listener_the_lookup_names_none(broker: FakeBroker) -> None:
    for empty in (None, ""):
        assert _lookup(ConnectionPool(broker.url, advertised_listener=empty)) == BrokerAddress(
            broker.url
        )
    assert [x.listener for x in broker.lookups()] == [None, None]


def test_a_listener_the_broker_does_not_have_fails_the_lookup_with_its_words(
    broker: FakeBroker,
) -> None:
    with pytest.raises(TopicLookupError, match="the broker do not have externall listener"):
        _lookup(ConnectionPool(broker.url, advertised_listener="externall"))
