"""``--check-config``'s output: the global values, then each per-topic table as resolved."""

from __future__ import annotations

from pathlib import Path

from pulsar_bruce.config import load_config
from pulsar_bruce.config.effective import effective_config_toml

TABLES = """\
[topics."logs-*"]
rate_limit_messages = 5000
max_message_bytes = "1MiB"

[topics."acme/shop/orders"]
schema = "string"
compression = "zstd"

[topics."acme/billing/*"]
encryption_keys = ["/etc/keys/billing.pem", "audit=/etc/keys/a.pem"]
"""


def test_per_topic_tables_are_printed_under_their_full_names_and_load_back(
    tmp_path: Path,
) -> None:
    path = tmp_path / "bruce.toml"
    path.write_text('compression = "lz4"\n' + TABLES)
    printed = effective_config_toml(load_config({}, {}, str(path)))
    tables = printed[printed.index("[topics.") :]
    assert tables == (
        '[topics."persistent://public/default/logs-*"]\n'
        "max_message_bytes = 1048576\n"
        "rate_limit_messages = 5000\n"
        '[topics."persistent://acme/shop/orders"]\n'
        'compression = "zstd"\n'
        'schema = "string"\n'
        '[topics."persistent://acme/billing/*"]\n'
        'encryption_keys = ["billing=/etc/keys/billing.pem", "audit=/etc/keys/a.pem"]\n'
    )
    assert 'compression = "lz4"\n' in printed[: printed.index("[topics.")]
    again = tmp_path / "effective.toml"
    again.write_text(printed)
    assert effective_config_toml(load_config({}, {}, str(again))) == printed


def test_without_tables_nothing_per_topic_is_printed() -> None:
    assert "[topics." not in effective_config_toml(load_config({}, {}))
