"""Which broker errors a resend can cure, and which it cannot.

Retriable (``ServiceNotReady``, ``TooManyRequests``, ``PersistenceError``,
``ProducerBusy``, failed lookups, ...): back off, look up again, resend.
Permanent (the topic is terminated or missing, we are not allowed, another
producer fenced us), and a ``ChecksumError`` on a batch whose own copy is
corrupt (:func:`frame_intact`): the affected messages are discarded as
``broker_rejected`` (``schema_incompatible`` when it is our ``--schema`` the
topic refuses) and the topic is retried with backoff, while every other
topic keeps flowing.  Some codes mean different things by their message:
``ProducerBusy`` and ``MetadataError`` (:func:`creation_refusal`).
"""

from __future__ import annotations

import re
from enum import Enum

from pulsar_bruce import reasons
from pulsar_bruce.connection.broker_connection import ConnectionClosedError, ServerError
from pulsar_bruce.connection.pool import TopicLookupError
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import FrameError, decode_frame_body
from pulsar_bruce.model.batch import SealedBatch

#: ``ServerCnx.handleProducer`` / ``AbstractTopic``: a ProducerBusy for the topic's limit.
MAX_PRODUCERS_TEXT = "reached max producers limit"
#: ``ServerCnx.handleProducer``: the MetadataError of a topic that takes encrypted messages only.
ENCRYPTION_REQUIRED_TEXT = "Encryption is required"
#: The message id -1 of a receipt for a message not stored, as the uint64 on the wire.
NOT_STORED = 2**64 - 1
_AUTHENTICATION_ERROR = pb.ServerError.Name(pb.AuthenticationError) + ":"
#: A Java exception's class name before its message (``org.apache...SchemaException: ``).
_JAVA_EXCEPTION = re.compile(r"\b(?:[a-z]\w*\.)+[A-Z]\w*(?:Exception|Error): ")


class Refusal(Enum):
    """How a failed producer creation (lookup, connection, ``Producer`` request) is handled."""

    RETRY = "retry"
    #: Discard what waits as ``broker_rejected``, keep retrying with backoff.
    PERMANENT = "permanent"
    #: ``ProducerBusy``: another producer holds our name on the topic.
    NAME_CONFLICT = "name_conflict"
    #: ``ProducerBusy``: the topic has its maximum number of producers; retried.
    MAX_PRODUCERS = "max_producers"


PERMANENT_ERRORS = frozenset(
    {
        pb.NotAllowedError,
        pb.TopicTerminatedError,
        pb.ProducerFenced,
        pb.AuthorizationError,
        pb.AuthenticationError,
        pb.TopicNotFound,
        pb.InvalidTopicName,
        pb.IncompatibleSchema,
        pb.UnsupportedVersionError,
    }
)


def is_permanent(error: int | None) -> bool:
    return error is not None and error in PERMANENT_ERRORS


def refusal_reason(name: str | None) -> str:
    """The discard reason of what waits for a producer the broker refuses for good
    (``name``: the error's, see :func:`error_name`)."""
    if name == pb.ServerError.Name(pb.IncompatibleSchema):
        return reasons.SCHEMA_INCOMPATIBLE
    return reasons.BROKER_REJECTED


def one_line(text: str, limit: int = 400) -> str:
    """A broker's error text fit for one log line: the Java broker's ``caused by`` repeat
    and exception class names dropped, whitespace (pretty-printed schemas) collapsed."""
    text = " ".join(_JAVA_EXCEPTION.sub("", text.split(" caused by ", 1)[0]).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def error_name(error: int | None) -> str:
    if error is None:
        return "no error code"
    return pb.ServerError.Name(error) if error in pb.ServerError.values() else str(error)


def frame_intact(frame: bytes) -> bool:
    """Whether our own copy of a batch's Send frames (one, or a message's chunks) still
    decodes (checksums hold): after a ``ChecksumError`` an intact batch is resent, a
    corrupt one cannot be cured."""
    offset = 0
    try:
        while offset < len(frame):
            size = int.from_bytes(frame[offset : offset + 4], "big")
            decode_frame_body(frame[offset + 4 : offset + 4 + size])
            offset += 4 + size
    except FrameError:
        return False
    return offset == len(frame)


def creation_refusal(exc: BaseException) -> tuple[Refusal, int | None]:
    """Classify why creating the producer failed, with the broker's error code if any.

    A refused Connect handshake (AuthenticationError, pulsar-broker ``ServerCnx.handleConnect``)
    reaches us as a closed connection whose text starts with the code's name (the
    connection layer's ``HandshakeError``), so it is recognised by that text.

    A backlog quota refuses producers two ways (``BacklogQuotaManager``): under
    ``producer_exception`` with ``ProducerBlockedQuotaExceededException``, on which the
    Java client fails its pending sends at once (``ProducerImpl.connectionOpened``):
    permanent until the backlog shrinks; under ``producer_request_hold`` with
    ``ProducerBlockedQuotaExceededError``: hold the messages and retry.
    """
    text = str(exc)
    error: int | None = None
    if isinstance(exc, (ServerError, TopicLookupError)):
        error = exc.error
    elif isinstance(exc, ConnectionClosedError) and text.startswith(_AUTHENTICATION_ERROR):
        error = pb.AuthenticationError
    if error == pb.ProducerBusy:
        limit = MAX_PRODUCERS_TEXT in text
        return (Refusal.MAX_PRODUCERS if limit else Refusal.NAME_CONFLICT), error
    if (
        is_permanent(error)
        or (error == pb.MetadataError and ENCRYPTION_REQUIRED_TEXT in text)
        or error == pb.ProducerBlockedQuotaExceededException
    ):
        return Refusal.PERMANENT, error
    return Refusal.RETRY, error


def answered_duplicate(receipt: pb.CommandSendReceipt) -> bool:
    """The receipt names message id -1:-1: the broker stored nothing for it (see below)."""
    if not receipt.HasField("message_id"):
        return False
    return NOT_STORED in (receipt.message_id.ledgerId, receipt.message_id.entryId)


def unstored_reason(topic: str, receipt: pb.CommandSendReceipt, batch: SealedBatch) -> str | None:
    """Why a receipt confirms a batch the broker did not store (None: it is stored).

    The Java broker answers message id -1:-1 for a duplicate on a persistent topic
    (``MessageDeduplication.isDuplicate``, ``Producer.MessagePublishContext``) and for a
    message it dropped under load on a non-persistent one (``ServerCnx.handleSend``).
    A duplicate of a batch we wrote before under these very ids (a resend after a lost
    connection, an unload, a restart from the spool), by a write the broker did not refuse,
    is our earlier copy, stored once:
    that is the delivery deduplication exists for, so it counts as acked.  A duplicate
    of a batch written for the first time is someone else's message under our name and
    ids (``deduplicated``): this copy is not stored.
    """
    if not receipt.HasField("message_id"):
        return None
    message_id = receipt.message_id
    if NOT_STORED not in (message_id.ledgerId, message_id.entryId):
        return None
    if topic.startswith("non-persistent://"):
        return reasons.BROKER_DROPPED
    if batch.send_attempts - batch.refused_writes > 1 or batch.producer_name:
        return None  # a write before this one, under these ids, may be stored
    return reasons.DEDUPLICATED


#: ``MessageDeduplication.MessageDupUnknownException``'s text, in its ``PersistenceError``.
DUP_UNKNOWN_TEXT = "cannot determine whether the message is a duplicate"


def not_yet_known(error: pb.CommandSendError) -> bool:
    """The broker cannot tell yet whether the Send is a duplicate: an earlier write of its
    ids is pushed and not persisted (``PersistentTopic.publishMessage``)."""
    return error.error == pb.PersistenceError and DUP_UNKNOWN_TEXT in error.message.lower()


def count_failure(batch: SealedBatch | None) -> None:
    """The broker failed ``batch`` (see ``SealedBatch.failed_sends``)."""
    if batch is not None:
        batch.failed_sends += 1


#: Answers with which a broker asks for time (throttled lookups, a name or the producer limit
#: taken): retried after a growing wait, as if nothing had answered.
_SLOW_DOWN = frozenset({pb.TooManyRequests, pb.ProducerBusy})


def unreachable(exc: BaseException) -> bool:
    """No broker answered the attempt (refused or lost connection, no answer in time)."""
    return isinstance(exc, (OSError, ConnectionClosedError))


def answered(exc: BaseException, owner_named: bool) -> bool:
    """Whether a failed attempt to create a producer counts as answered by the cluster, so
    the next one comes soon (``backoff.Retry``): a broker's error other than a request to
    slow down, or an owner named by a lookup that cannot be reached (it died; the cluster
    hands its bundles to another broker once its metadata session expires)."""
    refusal, error = creation_refusal(exc)
    if refusal is not Refusal.RETRY:
        return False
    if isinstance(exc, (ServerError, TopicLookupError)):
        return error not in _SLOW_DOWN
    return owner_named and unreachable(exc) and not isinstance(exc, TimeoutError)
