"""The journal stage: the write-ahead journal or its null twin, never a ``None`` to test for."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from pulsar_bruce.spool.journal import Journal
from pulsar_bruce.spool.journal_stage import NO_JOURNAL, JournalStage, NoJournal

PACKAGE = Path(__file__).resolve().parents[4] / "daemon" / "pulsar_bruce"


def _public_methods(cls: type) -> dict[str, list[str]]:
    """Public method -> its parameters' names (annotations are strings, spelt per module)."""
    return {
        name: list(inspect.signature(member).parameters)
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    }


def test_no_journal_answers_every_call_the_stage_declares() -> None:
    """Each call the parts make on the stage has a twin that does nothing, with the same
    signature, so a part never needs to ask whether there is a journal."""
    declared = _public_methods(JournalStage)  # type: ignore[type-abstract]
    journal, null = _public_methods(Journal), _public_methods(NoJournal)
    assert declared, "the protocol declares no calls"
    for name, signature in declared.items():
        assert journal[name] == signature, name
        assert null[name] == signature, name
    assert Journal.write_ahead and not NO_JOURNAL.write_ahead


def test_the_null_journal_owes_nothing() -> None:
    recovered = NO_JOURNAL.open()
    assert (recovered.messages, recovered.lost_messages, recovered.batches) == (0, 0, [])


def test_no_part_asks_whether_there_is_a_journal() -> None:
    """The journal is one stage (``spool/journal_stage.py``): no ``journal is None`` tests
    scattered over the parts that call it (a batch's own ``journal``, its entry in the
    journal, is the journal's and the batch builder's business)."""
    asking = re.compile(r"(?:self\.|(?<![.\w]))journal is (?:not )?None")  # not batch.journal
    found = [
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.parent.name != "batch" and not path.name.startswith("journal")
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if asking.search(line)
    ]
    assert not found, f"ask the journal stage instead: {found}"


def test_only_the_pipeline_holds_the_journal() -> None:
    """The topic manager, the outcomes and the spooler take no journal: they write down what
    happened and the pipeline hands it over (``pipeline/journalling.py``), whose calls are
    also the drivers' one hook (``SendJournal``)."""
    holding = re.compile(r"\bJournalStage\b|\bspool\.journal import\b")
    found = [
        str(path.relative_to(PACKAGE))
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.parent.name != "pipeline" and not path.name.startswith("journal")
        if holding.search(path.read_text())
    ]
    assert not found, f"hand the pipeline what happened instead: {found}"
