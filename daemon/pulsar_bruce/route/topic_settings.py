"""Per-topic options applied to topics and their producers, sans-IO.

Batching limits (key-based batching too), compression, key routing, the
largest message, the rate limit, the schema and the encryption keys can be set per topic
(exact name or glob) in the config file; this module turns the resolved :class:`TopicSettings`
into the objects the hot path reads: a shared :class:`BatchPolicy` per
distinct setting, ``Topic.max_message_bytes``, ``Topic.key_hash`` and the
rate-limit budget.
On SIGHUP the same code runs again with the new file.
"""

from __future__ import annotations

from pulsar_bruce.batch.compression import codec
from pulsar_bruce.batch.encryption import Encryptor, Recipient, read_recipients
from pulsar_bruce.config import Config, ConfigError, TopicSettings
from pulsar_bruce.model.schema import ProducerSchema
from pulsar_bruce.producer.partition_producer import BatchPolicy
from pulsar_bruce.route.key_hash import HASHERS
from pulsar_bruce.route.topic import Topic


class TopicConfigurator:
    """Resolves and applies per-topic settings; policies are shared between equal settings."""

    def __init__(self, config: Config):
        self.config = config
        self._policies: dict[
            tuple[int, int, float, str, int, bool, ProducerSchema, tuple[str, ...]], BatchPolicy
        ] = {}
        #: The public keys of every ``encryption_keys`` value, read at start and on SIGHUP.
        self._recipients = encryption_recipients(config)
        self.settings: dict[str, TopicSettings] = {}

    def policy(self, topic: Topic) -> BatchPolicy:
        settings = self.settings.get(topic.name) or self.config.topic_settings(topic.name)
        key = (
            settings.batch_max_messages,
            settings.batch_max_bytes,
            settings.batch_max_delay_ms,
            settings.compression,
            settings.compression_level,
            settings.key_based_batching,
            settings.schema,
            settings.encryption_keys,
        )
        policy = self._policies.get(key)
        if policy is None:
            compression, compressor = codec(settings.compression, settings.compression_level)
            policy = BatchPolicy(
                max_messages=settings.batch_max_messages,
                max_bytes=settings.batch_max_bytes,
                max_delay_s=settings.batch_max_delay_ms / 1000.0,
                compression=compression,
                compressor=compressor,
                key_based=settings.key_based_batching,
                schema=settings.schema,
                encryptor=self._encryptor(settings.encryption_keys),
            )
            self._policies[key] = policy
        return policy

    def apply(self, topic: Topic) -> TopicSettings:
        """Set ``topic``'s limits (and its producers' policies) from the configuration."""
        settings = self.config.topic_settings(topic.name)
        self.settings[topic.name] = settings
        topic.max_message_bytes = settings.max_message_bytes
        topic.key_hash = HASHERS[settings.key_routing]
        if settings.rate_limit_messages:
            if topic.rate_budget is None or topic.rate_budget > settings.rate_limit_messages:
                topic.rate_budget = settings.rate_limit_messages
        else:
            topic.rate_budget = None
        policy = self.policy(topic)
        for producer in topic.owned_producers():
            producer.set_policy(policy)
        return settings

    def refill(self, topic: Topic) -> None:
        """A new rate-limit interval starts."""
        settings = self.settings.get(topic.name)
        if settings is not None and settings.rate_limit_messages:
            topic.rate_budget = settings.rate_limit_messages

    def reconfigure(self, config: Config, topics: list[Topic]) -> None:
        """SIGHUP: the same topics under the new configuration (a ConfigError, nothing changed,
        when a key file cannot be used)."""
        self._recipients = encryption_recipients(config)
        self.config = config
        self._policies.clear()
        for topic in topics:
            self.apply(topic)

    def _encryptor(self, keys: tuple[str, ...]) -> Encryptor | None:
        """A new data key for these recipients (None: not encrypted)."""
        return Encryptor(self._recipients[keys]) if keys else None

    def largest_message_bytes(self) -> int:
        """What the socket reader must be able to receive."""
        sizes = [self.config.max_message_bytes]
        sizes += [
            value
            for override in self.config.topic_overrides
            for name, value in override.values
            if name == "max_message_bytes"
        ]
        return max(sizes)


def encryption_recipients(config: Config) -> dict[tuple[str, ...], tuple[Recipient, ...]]:
    """The public keys of every ``encryption_keys`` value the configuration gives, globally or
    per topic, read and checked now: a ConfigError naming where one was given if unusable."""
    given = [("--encryption-keys", config.encryption_keys)] + [
        (f"topics.{o.pattern!r}.encryption_keys", value)
        for o in config.topic_overrides
        for name, value in o.values
        if name == "encryption_keys"
    ]
    recipients: dict[tuple[str, ...], tuple[Recipient, ...]] = {}
    for where, keys in given:
        if keys and keys not in recipients:
            try:
                recipients[keys] = read_recipients(keys)
            except ValueError as exc:
                raise ConfigError(f"{where}: {exc}") from None
    return recipients
