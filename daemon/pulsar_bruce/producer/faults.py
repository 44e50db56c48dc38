"""Which broker errors a resend can cure, and which it cannot.

Retriable (``ServiceNotReady``, ``TooManyRequests``, ``PersistenceError``,
``ProducerBusy``, failed lookups, ...): back off, look up again, resend.
Permanent (the topic is terminated or missing, we are not allowed, another
producer fenced us), and a ``ChecksumError`` on a batch whose own copy is
corrupt (:func:`frame_intact`): the affected messages are discarded as
``broker_rejected`` and the topic is retried with backoff, while every other
topic keeps flowing.
"""

from __future__ import annotations

from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import FrameError, decode_frame_body

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
