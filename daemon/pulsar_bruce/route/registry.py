"""The topics the daemon has seen, by the bytes senders write and by full name, sans-IO."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from pulsar_bruce.parse.topic import normalize_topic
from pulsar_bruce.route.topic import Topic
from pulsar_bruce.route.topic_state import TopicState

#: Bad topic names remembered (so a flood of them costs one dict lookup each), at most.
_BAD_TOPIC_CACHE_LIMIT = 1024


class Configurator(Protocol):
    """Sets a topic's limits from the configuration (``route/topic_settings.py``)."""

    def apply(self, topic: Topic, /) -> object: ...


class TopicRegistry:
    """Creates each topic once; ``t`` and ``persistent://public/default/t`` share one.

    A new topic gets its per-topic settings at once (``configurator``: before its first
    message is checked) and is written down; the edge takes the new ones
    (:meth:`take_added`) to look their partitions up.
    """

    def __init__(self, configurator: Configurator | None = None):
        #: Keyed by the topic bytes exactly as senders write them (the hot path's lookup).
        self.by_bytes: dict[bytes, Topic] = {}
        #: The same keys, to each topic's :attr:`Topic.state`: what the compiled intake
        #: looks its messages' topics up in.
        self.states: dict[bytes, TopicState] = {}
        #: Keyed by full Pulsar name.
        self.by_name: dict[str, Topic] = {}
        self._configurator = configurator
        #: Topics created since the last :meth:`take_added` (read-only outside).
        self.added: list[Topic] = []
        self._bad: set[bytes] = set()

    def __iter__(self) -> Iterator[Topic]:
        return iter(self.by_name.values())

    def __len__(self) -> int:
        return len(self.by_name)

    def take_added(self) -> list[Topic]:
        """The topics created since the last call, in order."""
        added, self.added = self.added, []
        return added

    def lookup(self, topic_bytes: bytes) -> Topic | None:
        return self.by_bytes.get(topic_bytes) or self.add(topic_bytes)

    def add(self, topic_bytes: bytes) -> Topic | None:
        """The topic for bytes not seen before; None if they are no valid topic name."""
        if topic_bytes in self._bad:
            return None
        name = normalize_topic(topic_bytes)
        if name is None:
            if len(self._bad) >= _BAD_TOPIC_CACHE_LIMIT:
                self._bad.clear()
            self._bad.add(topic_bytes)
            return None
        topic = self.by_name.get(name)
        if topic is None:
            topic = Topic(name)
            self.by_name[name] = topic
            if self._configurator is not None:
                self._configurator.apply(topic)
            self.added.append(topic)
        self.by_bytes[topic_bytes] = topic
        self.states[topic_bytes] = topic.state
        return topic
