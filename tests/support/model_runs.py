"""The settings of the "nothing lost" state machines: short and repeatable in ``make test``,
long and random in ``make test-models``.

``make test`` runs each machine's examples derandomized, so a run is the same every time.
Each machine has found loss paths only at many times those examples, with new seeds
(docs/delivery.md), so ``make test-models`` sets :data:`EXAMPLES_ENV` and each machine
then runs that many examples from a random seed, with no example database, printing the
failing example's blob (``@reproduce_failure``) for a test that replays it.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

#: Examples per machine for a long random run (``make test-models MODEL_EXAMPLES=N``).
EXAMPLES_ENV = "PULSAR_BRUCE_MODEL_EXAMPLES"


def model_settings(examples: int, steps: int) -> settings:
    """``examples`` derandomized runs of up to ``steps`` steps; or, with
    :data:`EXAMPLES_ENV` set, that many random ones."""
    long_run = os.environ.get(EXAMPLES_ENV)
    if not long_run:
        return settings(
            max_examples=examples, stateful_step_count=steps, deadline=None, derandomize=True
        )
    return settings(
        max_examples=int(long_run),
        stateful_step_count=steps,
        deadline=None,
        derandomize=False,
        database=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
    )
