"""Which broker answers a resend can cure (``producer/faults.py``): a receipt that confirms
nothing stored, and refusals at creation."""

from __future__ import annotations

from pulsar_bruce import reasons
from pulsar_bruce.connection.broker_connection import ServerError
from pulsar_bruce.frame import pulsar_api_pb2 as pb

from tests.unit.daemon.producer.helpers import MINUS_ONE, receipt


def test_a_minus_one_receipt_for_our_own_resend_is_our_stored_copy() -> None:
    """A resend under the same ids (lost connection, unload, restart from the spool) that
    the broker calls a duplicate is the copy it stored from us before: acked, not lost."""
    from pulsar_bruce.model.batch import SealedBatch
    from pulsar_bruce.producer.faults import unstored_reason

    topic = "persistent://public/default/t"
    first_write = SealedBatch(count=2, payload=b"", buffer_bytes=0, send_attempts=1)
    resent = SealedBatch(count=2, payload=b"", buffer_bytes=0, send_attempts=2)
    from_spool = SealedBatch(count=2, payload=b"", buffer_bytes=0, send_attempts=1,
                             producer_name="edge-host-abc123")  # fmt: skip
    duplicate = receipt(0, MINUS_ONE, MINUS_ONE)
    assert unstored_reason(topic, duplicate, first_write) == reasons.DEDUPLICATED
    assert unstored_reason(topic, duplicate, resent) is None
    assert unstored_reason(topic, duplicate, from_spool) is None
    assert unstored_reason("non-persistent://public/default/t", duplicate, resent) == (
        reasons.BROKER_DROPPED
    )


def test_backlog_quota_refusals_at_creation() -> None:
    """``producer_exception`` refuses for good (discard what waits, as the Java client fails
    its pending sends); ``producer_request_hold`` holds the messages and retries."""
    from pulsar_bruce.producer.faults import Refusal, creation_refusal

    exception = ServerError(pb.ProducerBlockedQuotaExceededException, "backlog quota exceeded")
    held = ServerError(pb.ProducerBlockedQuotaExceededError, "backlog quota exceeded")
    assert creation_refusal(exception)[0] is Refusal.PERMANENT
    assert creation_refusal(held)[0] is Refusal.RETRY
