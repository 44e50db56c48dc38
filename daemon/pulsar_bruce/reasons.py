"""Discard reasons: the stable ``reason`` label values of ``pulsar_bruce_discarded_total``."""

from typing import Final, Protocol

MALFORMED: Final = "malformed"
UNSUPPORTED_API_KEY: Final = "unsupported_api_key"
UNSUPPORTED_VERSION: Final = "unsupported_version"
TOO_LARGE: Final = "too_large"
BAD_TOPIC: Final = "bad_topic"
BUFFER_FULL: Final = "buffer_full"
RATE_LIMITED: Final = "rate_limited"
BROKER_REJECTED: Final = "broker_rejected"
RETRIES_EXHAUSTED: Final = "retries_exhausted"
SHUTDOWN: Final = "shutdown"
#: Not acked within ``--send-timeout-s`` of being sealed (the topic is stuck), and never
#: written to a broker: certainly not stored.
SEND_TIMEOUT: Final = "send_timeout"
#: Given up (``--send-timeout-s``, or at shutdown) after it had been written to a broker that
#: never confirmed it: the broker may have stored it, so it is not counted as a loss.
UNCONFIRMED: Final = "unconfirmed"
#: Persistent topic, receipt for message id -1:-1 (``MessageDeduplication.isDuplicate``): the
#: broker already holds a message with this producer name and sequence id that is not our
#: copy, so this one was not stored.
DEDUPLICATED: Final = "deduplicated"
#: Non-persistent topic, receipt for message id -1:-1: the broker dropped the message under
#: load (``ServerCnx.handleSend``, too many pending non-persistent messages).
BROKER_DROPPED: Final = "broker_dropped"
#: Lost to damage in the disk spool (a corrupt record, a file cut short or gone), as far as
#: the count can be known: this run's messages exactly, an earlier run's from record headers.
SPOOL_DAMAGED: Final = "spool_damaged"
#: The broker refused the schema the topic's producer declares (``--schema``;
#: ``IncompatibleSchema``): what waits for the topic, until it takes the producer.
SCHEMA_INCOMPATIBLE: Final = "schema_incompatible"
#: A batch of a topic with ``--encryption-keys`` could not be encrypted: discarded, since it
#: must never go out in plaintext instead.
ENCRYPTION_FAILED: Final = "encryption_failed"

ALL: Final = (
    MALFORMED,
    UNSUPPORTED_API_KEY,
    UNSUPPORTED_VERSION,
    TOO_LARGE,
    BAD_TOPIC,
    BUFFER_FULL,
    RATE_LIMITED,
    BROKER_REJECTED,
    RETRIES_EXHAUSTED,
    SHUTDOWN,
    SEND_TIMEOUT,
    UNCONFIRMED,
    DEDUPLICATED,
    BROKER_DROPPED,
    SPOOL_DAMAGED,
    SCHEMA_INCOMPATIBLE,
    ENCRYPTION_FAILED,
)


class MaybeStored(Protocol):
    @property
    def may_be_stored(self) -> bool: ...


def given_up(reason: str, batch: MaybeStored) -> str:
    """The true reason for giving up a batch (by time, at shutdown, after its attempts):
    ``unconfirmed`` when the broker may hold it (a write whose outcome is unknown, or an
    earlier copy: ``SealedBatch.may_be_stored``), else ``reason``: certainly not stored."""
    return UNCONFIRMED if batch.may_be_stored else reason
