"""Which broker errors a resend can cure, and which it cannot.

Retriable (``ServiceNotReady``, ``TooManyRequests``, ``PersistenceError``,
``ProducerBusy``, failed lookups, ...): back off, look up again, resend.
Permanent (the topic is terminated or missing, we are not allowed, another
producer fenced us): the affected messages are discarded as
``broker_rejected`` and the topic is retried with backoff, while every other
topic keeps flowing.
"""

from __future__ import annotations

from pulsar_bruce.frame import pulsar_api_pb2 as pb

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


def error_name(error: int | None) -> str:
    if error is None:
        return "no error code"
    return pb.ServerError.Name(error) if error in pb.ServerError.values() else str(error)
