"""Summarise py-spy ``--format raw`` output (collapsed stacks): where the samples went.

    python bench/profile_summary.py PROFILE.txt [--top 15]

Prints the functions with the most samples on top of the stack (self) and on the
stack at all (inclusive; frames present in every sample are left out), and the
hottest source lines. With ``py-spy --native`` the C frames (libc ``recv`` etc.)
show up too.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

#: Leaf frames that mean "waiting for work" (py-spy --native samples sleeping threads too).
_IDLE = ("epoll_wait ", "epoll_pwait ")
_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def _function(frame: str) -> str:
    """``name (path/file.py:12)`` -> ``name (path/file.py)``."""
    match = _FRAME.match(frame)
    if not match:
        return frame
    return f"{match.group('function')} ({match.group('file')})"


def summarize(path: Path, top: int = 15) -> str:
    self_fn: Counter[str] = Counter()
    inclusive_fn: Counter[str] = Counter()
    self_line: Counter[str] = Counter()
    total = idle = 0
    for raw in path.read_text().splitlines():
        stack, _, count_text = raw.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        if frames[-1].startswith(_IDLE):
            idle += count
            continue
        total += count
        self_line[frames[-1]] += count
        self_fn[_function(frames[-1])] += count
        for function in {_function(frame) for frame in frames}:
            inclusive_fn[function] += count
    if not total:
        return f"{path}: no samples"
    lines = [f"{path.name}: {total} busy samples ({idle} idle in epoll left out)"]
    for title, counter in (
        ("self (top of stack), by function", self_fn),
        ("inclusive, by function", inclusive_fn),
        ("self, by source line", self_line),
    ):
        lines.append(f"  {title}:")
        shown = [(name, count) for name, count in counter.most_common() if count < total]
        for name, count in shown[:top]:
            lines.append(f"    {100 * count / total:5.1f}%  {name}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path, nargs="+")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    for path in args.profile:
        print(summarize(path, args.top))


if __name__ == "__main__":
    main()
