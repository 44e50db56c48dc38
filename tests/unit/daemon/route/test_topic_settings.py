"""Per-topic overrides in the config file, and how they reach topics and producers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pulsar_bruce.config import Config, ConfigError, load_config
from pulsar_bruce.producer.partition_producer import PartitionProducer
from pulsar_bruce.route.topic import Topic
from pulsar_bruce.route.topic_settings import TopicConfigurator

FILE = """
batch_max_messages = 500
[topics."clicks"]
batch_max_messages = 10
compression = "zlib"
[topics."logs-*"]
rate_limit_messages = 100
max_message_bytes = "4KiB"
[topics."*"]
batch_max_delay_ms = 50
[topics."acme/prod/orders"]
batch_max_bytes = "16KiB"
"""


def config_from(tmp_path: Path, text: str = FILE) -> Config:
    path = tmp_path / "bruce.toml"
    path.write_text(text)
    return load_config({}, {}, str(path))


def test_exact_name_beats_globs_and_missing_keys_come_from_the_globals(tmp_path: Path) -> None:
    config = config_from(tmp_path)
    clicks = config.topic_settings("persistent://public/default/clicks")
    assert clicks.batch_max_messages == 10 and clicks.compression == "zlib"
    assert clicks.batch_max_delay_ms == 10.0  # the "*" glob does not apply: exact wins


def test_first_matching_glob_applies(tmp_path: Path) -> None:
    config = config_from(tmp_path)
    logs = config.topic_settings("persistent://public/default/logs-web")
    assert logs.rate_limit_messages == 100 and logs.max_message_bytes == 4096
    assert logs.batch_max_delay_ms == 10.0
    other = config.topic_settings("persistent://public/default/other")
    assert other.batch_max_delay_ms == 50 and other.batch_max_messages == 500


def test_patterns_are_qualified_like_topic_names(tmp_path: Path) -> None:
    config = config_from(tmp_path)
    orders = config.topic_settings("persistent://acme/prod/orders")
    assert orders.batch_max_bytes == 16384
    assert config.topic_settings("persistent://acme/test/orders").batch_max_bytes == 131072


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[topics."t"]\nsocket = "/x"\n', "'socket' cannot be set per topic (per-topic keys: "),
        (
            '[topics."t"]\nrate_limit_message = 5\n',
            "topics.'t': unknown key 'rate_limit_message' (did you mean 'rate_limit_messages'?)",
        ),
        ('[topics."t"]\nzzz = 5\n', "topics.'t': unknown key 'zzz' (per-topic keys: "),
        (
            "bufer_max_bytes = 5\n",
            "unknown key 'bufer_max_bytes' (did you mean 'buffer_max_bytes'?)",
        ),
        ('[topics."t"]\nbatch_max_messages = -1\n', "topics.'t'.batch_max_messages"),
        ('[topics."a/b"]\ncompression = "lz4"\n', "topics.'a/b'"),
        ("topics = 3\n", "topics"),
    ],
)
def test_bad_overrides_name_the_table_and_key(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(expected)):
        config_from(tmp_path, text)


def test_configurator_sets_limits_and_shares_policies(tmp_path: Path) -> None:
    configurator = TopicConfigurator(config_from(tmp_path))
    logs = Topic("persistent://public/default/logs-a")
    logs_b = Topic("persistent://public/default/logs-b")
    configurator.apply(logs)
    configurator.apply(logs_b)
    assert logs.max_message_bytes == 4096 and logs.rate_budget == 100
    assert configurator.policy(logs) is configurator.policy(logs_b)
    logs.rate_budget = 0
    configurator.refill(logs)
    assert logs.rate_budget == 100
    assert configurator.largest_message_bytes() == 64 * 1024 * 1024


def test_reconfigure_updates_existing_producers_and_lifts_limits(tmp_path: Path) -> None:
    configurator = TopicConfigurator(config_from(tmp_path))
    clicks = Topic("persistent://public/default/clicks")
    configurator.apply(clicks)
    producer = PartitionProducer(clicks.name, 0, 1, configurator.policy(clicks))
    clicks.attach([producer])
    producer.batch.append(b"", 0, b"xx-kept", 3, 64)
    configurator.reconfigure(
        config_from(tmp_path, '[topics."clicks"]\nbatch_max_messages = 3\n'), [clicks]
    )
    assert producer.policy.max_messages == 3
    assert producer.batch.count == 1  # nothing dropped
    logs = Topic("persistent://public/default/logs-a")
    logs.rate_budget = 5
    configurator.apply(logs)
    assert logs.rate_budget is None


def test_policy_compresses_with_the_configured_codec_and_level() -> None:
    from pulsar_bruce.batch.compression import decompress
    from pulsar_bruce.frame import pulsar_api_pb2 as pb

    config = load_config({"compression": "zstd", "compression_level": "19"}, {})
    policy = TopicConfigurator(config).policy(Topic("persistent://public/default/t"))
    assert policy.compression == pb.ZSTD and policy.compressor is not None
    data = b"abc" * 1000
    packed = policy.compressor(data)
    assert packed.startswith(b"\x28\xb5\x2f\xfd") and decompress(pb.ZSTD, packed, 3000) == data
    snappy = TopicConfigurator(load_config({"compression": "snappy"}, {}))
    assert snappy.policy(Topic("persistent://public/default/u")).compression == pb.SNAPPY
