"""Bruce topic names -> fully qualified Pulsar topic names."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pulsar_bruce.parse.topic import is_partition_name, normalize_topic, partition_name


def test_short_name_goes_to_public_default() -> None:
    assert normalize_topic(b"t") == "persistent://public/default/t"


def test_tenant_namespace_topic_is_persistent() -> None:
    assert normalize_topic(b"acme/logs/events") == "persistent://acme/logs/events"


def test_full_persistent_name_is_kept() -> None:
    name = "persistent://acme/logs/events"
    assert normalize_topic(name.encode()) == name


def test_full_non_persistent_name_is_kept() -> None:
    name = "non-persistent://acme/logs/events"
    assert normalize_topic(name.encode()) == name


def test_short_name_and_full_default_name_normalize_to_the_same_topic() -> None:
    assert normalize_topic(b"t") == normalize_topic(b"persistent://public/default/t")


@pytest.mark.parametrize(
    "name",
    ["my-topic", "my_topic.v2", "a:b=c", "topic-partition-3", "UPPER", "t%20x", "日志"],
)
def test_valid_local_names(name: str) -> None:
    assert normalize_topic(name.encode()) == f"persistent://public/default/{name}"


@pytest.mark.parametrize("tenant", ["acme", "a-b", "a_b", "a.b", "a=b", "a:b", "A1"])
def test_valid_tenant_and_namespace_characters(tenant: str) -> None:
    expected = f"persistent://{tenant}/{tenant}/t"
    assert normalize_topic(f"{tenant}/{tenant}/t".encode()) == expected


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"\xff\xfe", id="not-utf8"),
        pytest.param(b"t\xc3", id="truncated-utf8"),
        pytest.param(b"a/b", id="two-parts"),
        pytest.param(b"a/b/c/d", id="four-parts"),
        pytest.param(b"http://a/b/c", id="bad-domain"),
        pytest.param(b"://a/b/c", id="empty-domain"),
        pytest.param(b"Persistent://a/b/c", id="domain-case"),
        pytest.param(b"persistent://t", id="persistent-without-namespace"),
        pytest.param(b"persistent://a/t", id="persistent-two-parts"),
        pytest.param(b"persistent://a/b/c/d", id="persistent-four-parts"),
        pytest.param(b"persistent://", id="persistent-empty"),
        pytest.param(b"persistent://a/b/", id="empty-local-name"),
        pytest.param(b"/b/c", id="empty-tenant"),
        pytest.param(b"a//c", id="empty-namespace"),
        pytest.param(b"a/b/", id="empty-local"),
        pytest.param(b"/", id="slash"),
        pytest.param(b"my topic", id="space"),
        pytest.param(b" t", id="leading-space"),
        pytest.param(b"t\n", id="newline"),
        pytest.param(b"t\t", id="tab"),
        pytest.param("t\u00a0x".encode(), id="no-break-space"),
        pytest.param("t\u2028".encode(), id="line-separator"),
        pytest.param(b"t\x00", id="nul"),
        pytest.param(b"t\x01x", id="control-01"),
        pytest.param(b"t\x1f", id="control-1f"),
        pytest.param(b"t\x7f", id="del"),
        pytest.param(b"a b/ns/t", id="space-in-tenant"),
        pytest.param(b"acme/n s/t", id="space-in-namespace"),
        pytest.param(b"ac/me/ns/t", id="slash-in-tenant"),
        pytest.param("tenänt/ns/t".encode(), id="non-ascii-tenant"),
        pytest.param(b"a$b/ns/t", id="dollar-in-tenant"),
        pytest.param(b"non-persistent://t", id="non-persistent-without-namespace"),
    ],
)
def test_invalid_names_are_rejected(raw: bytes) -> None:
    assert normalize_topic(raw) is None


def test_c1_control_characters_are_rejected() -> None:
    assert normalize_topic("t\u0080x".encode()) is None


@settings(max_examples=500, deadline=None, derandomize=True)
@given(st.binary(max_size=80))
def test_arbitrary_bytes_give_a_full_name_or_none(raw: bytes) -> None:
    name = normalize_topic(raw)
    if name is not None:
        domain, sep, rest = name.partition("://")
        assert sep
        assert domain in ("persistent", "non-persistent")
        assert len(rest.split("/")) == 3
        assert all(rest.split("/"))
        assert normalize_topic(name.encode()) == name  # normalizing is idempotent


def test_is_partition_name() -> None:
    assert is_partition_name("persistent://public/default/t-partition-0")
    assert is_partition_name("persistent://public/default/t-partition-12")


@pytest.mark.parametrize(
    "topic",
    [
        "persistent://public/default/t",
        "persistent://public/default/t-partition-",
        "persistent://public/default/t-partition-x",
        "persistent://public/default/t-partition-1x",
        "persistent://public/default/t-partition-1\n",
        "persistent://public/default/t-partition",
        "persistent://public/default/tpartition-1",
    ],
)
def test_is_not_partition_name(topic: str) -> None:
    assert not is_partition_name(topic)


def test_partition_name_appends_the_pulsar_suffix() -> None:
    name = partition_name("persistent://public/default/t", 3)
    assert name == "persistent://public/default/t-partition-3"
    assert is_partition_name(name)
