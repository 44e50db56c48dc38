"""``make test-models``'s switch: the state machines' settings, short or long."""

from __future__ import annotations

import pytest

from tests.support.model_runs import EXAMPLES_ENV, model_settings


def test_make_test_runs_the_same_short_examples_each_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EXAMPLES_ENV, raising=False)
    short = model_settings(examples=200, steps=40)
    assert (short.max_examples, short.stateful_step_count) == (200, 40)
    assert short.derandomize


def test_make_test_models_runs_many_random_examples(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EXAMPLES_ENV, "20000")
    long = model_settings(examples=200, steps=40)
    assert (long.max_examples, long.stateful_step_count) == (20000, 40)
    assert not long.derandomize
    assert long.database is None  # each run new seeds, not the last run's examples replayed
    assert long.print_blob
