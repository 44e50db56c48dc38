"""Every relative link in README.md and docs/*.md leads somewhere.

A link's file must exist (relative to the page, inside the repository), and a
``#anchor`` must name a heading of its page, by GitHub's rules for heading
anchors (lower case, punctuation dropped, spaces to hyphens, ``-1``, ``-2`` for
repeats), or an explicit ``<a id="...">``.  Links to web addresses are not
fetched.  Every page of docs/ must be reachable from the README.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
_HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        match = _FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)[0] * len(match.group(1))
        elif fence is not None and match and match.group(1).startswith(fence):
            fence = None
        elif fence is None:
            yield number, line


def heading_text(markdown: str) -> str:
    """The text GitHub renders for a heading's markdown (links, code and emphasis undone)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", markdown)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.replace("`", "")
    return re.sub(r"\*+", "", text)


def slug(text: str) -> str:
    """GitHub's heading anchor (github-slugger): lower case, characters other than
    letters, digits, ``-``, ``_`` and spaces dropped, each space a hyphen."""
    kept = "".join(ch for ch in text.lower() if ch.isalnum() or ch in "-_ ")
    return kept.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose_lines(page.read_text()):
        found.update(_HTML_ANCHOR.findall(line))
        match = _HEADING.match(line)
        if match:
            base = slug(heading_text(match.group(2)))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def _code_span(match: re.Match[str]) -> str:
    """A code span is no link, and a link's text may hold one (`[`x`](y)`): keep a
    stand-in word, and the span's line breaks for the line numbers."""
    return "x" + "\n" * match.group(0).count("\n")


def links(page: Path) -> Iterator[tuple[int, str]]:
    """(line number, target) of every inline and reference link outside code."""
    lines = dict(prose_lines(page.read_text()))
    text = "\n".join(lines.get(n, "") for n in range(1, max(lines, default=0) + 1))
    offset = 1
    for block in re.split(r"(\n[ \t]*\n)", text):  # paragraphs: a span or link ends with one
        prose = re.sub(r"(`+)[\s\S]*?[^`]\1(?!`)", _code_span, block)
        for match in _LINK.finditer(prose):
            yield offset + prose.count("\n", 0, match.start()), match.group(2)
        for number, line in enumerate(prose.split("\n"), offset):
            reference = _REFERENCE.match(line)
            if reference:
                yield number, reference.group(1)
        offset += block.count("\n")


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    problems = []
    for number, target in links(page):
        where = f"{page.relative_to(root)}:{number}: {target}"
        if not target:
            problems.append(f"{where}: empty link")
            continue
        if _SCHEME.match(target):
            continue  # a web address (or mailto:): not fetched
        path_part, _, anchor = target.partition("#")
        if path_part.startswith("/"):
            problems.append(f"{where}: absolute path (write it relative to the page)")
            continue
        destination = (page.parent / path_part).resolve() if path_part else page
        if not destination.is_relative_to(root):
            problems.append(f"{where}: leaves the repository")
        elif not destination.exists():
            problems.append(f"{where}: no such file")
        elif anchor:
            if destination.suffix != ".md" or not destination.is_file():
                problems.append(f"{where}: an anchor into a page that is not markdown")
            elif anchor not in anchors(destination):
                problems.append(f"{where}: no heading with that anchor in {destination.name}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_links_resolve(page: Path) -> None:
    problems = broken_links(page)
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_every_docs_page_is_linked_from_the_readme() -> None:
    readme = ROOT / "README.md"
    linked = {
        (readme.parent / target.partition("#")[0]).resolve()
        for _, target in links(readme)
        if not _SCHEME.match(target)
    }
    orphans = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not orphans, f"docs pages the README does not link to: {orphans}"


def test_slugs_follow_github() -> None:
    cases = {
        "Key_Shared subscriptions: `--key-based-batching`":
            "key_shared-subscriptions---key-based-batching",
        "Looking into a stopped daemon's spool: `pulsar-bruce spool`":
            "looking-into-a-stopped-daemons-spool-pulsar-bruce-spool",
        "Confirmed delivery (stream socket)": "confirmed-delivery-stream-socket",
        "On pulsar-lite and on Apache Pulsar, one run":
            "on-pulsar-lite-and-on-apache-pulsar-one-run",
        "The `to_pulsar` command": "the-to_pulsar-command",
        "**Bold** and [a link](x.md) in a heading": "bold-and-a-link-in-a-heading",
        "Sizes: 1.5 µs / 10 KB": "sizes-15-µs--10-kb",
    }  # fmt: skip
    assert {heading: slug(heading_text(heading)) for heading in cases} == cases


def test_the_checker_finds_what_is_broken(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    other = tmp_path / "docs" / "other.md"
    other.write_text("# Other\n\n## Same\n\n## Same\n\n```\n# not a heading\n```\n")
    page = tmp_path / "README.md"
    page.write_text(
        "[ok](docs/other.md) [ok](docs/other.md#same-1) [ok](#top) [web](https://x.example/y)\n"
        "[gone](docs/missing.md) [bad anchor](docs/other.md#not-a-heading)\n"
        "[no repeat](docs/other.md#same-2) [code](docs/other.md#not-a-heading-1)\n"
        "`[not a link](nowhere.md)` [`code` text](docs/other.md#other)\n"
        '<a id="top"></a>\n'
        "```\n[in a code block](nowhere.md)\n```\n"
        "[ref]: docs/none.md\n"
    )
    problems = broken_links(page, root=tmp_path)
    assert [p.split(": ", 2)[1] for p in problems] == [
        "docs/missing.md",
        "docs/other.md#not-a-heading",
        "docs/other.md#same-2",
        "docs/other.md#not-a-heading-1",
        "docs/none.md",
    ]
