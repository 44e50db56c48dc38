"""The daemon's tests build their datagrams with to_pulsar's encoders, bad topic names
included: those check the daemon's own rule, so the senders' copy of it
(to_pulsar.topics, which refuses them before encoding) is switched off here."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _encoders_accept_any_topic(monkeypatch: pytest.MonkeyPatch) -> None:
    import to_pulsar.encoding

    monkeypatch.setattr(to_pulsar.encoding, "check_topic", lambda raw: None)
