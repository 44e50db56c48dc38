"""The fenced code blocks of README.md and docs/*.md, for tests that run them as written.

A test picks a block by its language and a piece of text only it holds, so a block
that is edited away (or no longer says what the test runs) fails the test instead of
being skipped, and substitutes only what must differ here (the broker's address, file
paths): the rest runs as the reader would type it.
"""

from __future__ import annotations

import re

from tests.support.processes import ROOT

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+-]*)")


def blocks(page: str, language: str) -> list[str]:
    """The text of every block of ``page`` (relative to the repository) fenced as
    ``language``, in page order."""
    found: list[str] = []
    fence: str | None = None
    current: list[str] = []
    kind = ""
    for line in (ROOT / page).read_text().splitlines():
        match = _FENCE.match(line)
        if fence is None and match:
            fence, kind, current = match.group(1), match.group(2), []
        elif fence is not None and match and match.group(1).startswith(fence):
            if kind == language:
                found.append("\n".join(current) + "\n")
            fence = None
        elif fence is not None:
            current.append(line)
    return found


def block(page: str, language: str, holding: str) -> str:
    """The one ``language`` block of ``page`` that contains ``holding``."""
    matches = [text for text in blocks(page, language) if holding in text]
    assert len(matches) == 1, f"{page}: {len(matches)} {language} blocks hold {holding!r}"
    return matches[0]


def shell_commands(text: str) -> list[str]:
    """The commands of a sh block: comments dropped, ``\\`` continuations joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    commands = []
    for line in joined.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if line:
            commands.append(line)
    return commands


def substitute(text: str, replacements: dict[str, str]) -> str:
    """``text`` with each key replaced; a key the text does not hold is an error (the
    page changed under the test)."""
    for old, new in replacements.items():
        assert old in text, f"{old!r} is not in the block:\n{text}"
        text = text.replace(old, new)
    return text
