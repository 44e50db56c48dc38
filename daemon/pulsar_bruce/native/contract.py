"""What the compiled admitter (``admitter.c``) reads and calls on the Python side's objects.

The C code looks these attributes up by name (its ``pb_admitter_names`` table and one
``PyObject_GetAttrString``), so a rename on the Python side would break only the compiled
intake, and only at run time.  This is the declared list: ``test_architecture.py`` checks,
in both intake passes, that the C source names exactly these and that each class has each
attribute.  All are public; the classes are named by their module under ``pulsar_bruce``
(strings only: this bottom-layer module imports nothing above it).
"""

from __future__ import annotations

from typing import Final

#: Class (module path within ``pulsar_bruce``, class name) -> the attributes C reads,
#: sets (``round_robin``) or calls.
ADMITTER_READS: Final[dict[tuple[str, str], tuple[str, ...]]] = {
    ("route.router", "Topic"): (
        "max_message_bytes", "rate_budget", "key_hash", "producers", "round_robin",
    ),
    ("producer.partition_producer", "PartitionProducer"): (
        "batch", "ready", "available", "max_batch_bytes", "policy", "seal",
    ),
    ("producer.partition_producer", "BatchPolicy"): ("max_messages", "key_based"),
    ("batch.batch_builder", "BatchBuilder"): ("tags", "tag_last"),
    ("model.confirmation", "TagRun"): ("tag", "count"),
    ("model.confirmation", "Confirmation"): ("outstanding",),
    ("model.ledger", "Ledger"): ("buffered_bytes", "accept_many"),
    ("spool.policy", "SpoolPolicy"): ("memory_limit",),
    ("topics.manager", "TopicManager"): ("batch_sealed", "batch_opened"),
}  # fmt: skip
