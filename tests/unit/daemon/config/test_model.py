"""The configuration model (``config/model.py``): every option declared once, as a field with
its metadata; the per-topic settings start from the global values."""

from __future__ import annotations

import dataclasses

from pulsar_bruce.config import (
    OPTIONS,
    OPTIONS_BY_NAME,
    TOPIC_OPTIONS,
    Config,
    TopicSettings,
    load_config,
)

from tests.unit.daemon.config.helpers import NO_ENV, NO_FLAGS

#: Config fields that are not options: from [topics."..."] tables and $PULSAR_BRUCE_AUTH_TOKEN.
NOT_OPTIONS = ("topic_overrides", "auth_token", "config_file")


# -- one declaration per option ------------------------------------------------------------------


def test_the_model_defaults_are_the_parsed_option_defaults() -> None:
    assert Config() == load_config(NO_FLAGS, NO_ENV)
    for option in OPTIONS:
        assert getattr(Config(), option.name) == option.parse(option.default), option.name


def test_the_option_table_is_the_model_fields() -> None:
    fields = [f.name for f in dataclasses.fields(Config)]
    assert [o.name for o in OPTIONS] == [f for f in fields if f not in NOT_OPTIONS]
    assert tuple(f.name for f in dataclasses.fields(TopicSettings)) == TOPIC_OPTIONS
    assert set(TOPIC_OPTIONS) < set(OPTIONS_BY_NAME)


def test_topic_settings_start_from_the_global_values() -> None:
    config = load_config({"compression": "zlib", "batch_max_messages": "7"}, NO_ENV)
    settings = config.topic_settings("persistent://public/default/t")
    assert type(settings) is TopicSettings
    assert settings == TopicSettings(
        **{name: getattr(config, name) for name in TOPIC_OPTIONS}
    )
    assert (settings.compression, settings.batch_max_messages) == ("zlib", 7)
