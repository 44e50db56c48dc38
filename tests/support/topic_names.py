"""Topic names to hold a sender's topic check against the daemon's rule: the edge cases
of each part of it, and deterministic random ones from the characters that matter."""

from __future__ import annotations

import random

EDGE_CASES = [
    "t", "clicks", "my topic", "a/b/c", "a/b/c/d", "a/b", "/b/c", "a//c", "a/b/", "a b/c/d",
    "a/b c/d", "ten=ant/n:s.x_y/t-1", "a/b/c d", "persistent://x/y/z", "non-persistent://x/y/z",
    "foo://x/y/z", "persistent://t", "persistent://a/b", "persistent://a/b/c/d", "://a/b/c",
    "persistent:/x/y/z", "a://b", "x\xa0y", "x\u3000y", "x\u2009y", "x\u180ey", "x\x85y",
    "x\x7fy", "x\ty", "é", "a/b/é", "é/b/c", "a/b/c://d", "persistent://a/b/c://d", "t\x00",
    "日本語", "x\U0001f600y", "-", ":", "a:b", "a/b/\u200b",
]  # fmt: skip
BAD_UTF8 = [b"\xff", b"a\xc3", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"a/b/\xe2\x82"]
_PIECES = ["a", "Z", "9", "_", "-", "=", ":", ".", "/", "/", "://", " ", "é", "\u3000", "\t",
           "persistent", "non-persistent", "\x7f", "\xa0", "x"]  # fmt: skip


def topic_names(count: int = 400, seed: int = 38) -> list[bytes]:
    rng = random.Random(seed)
    generated = ["".join(rng.choices(_PIECES, k=rng.randint(1, 7))) for _ in range(count)]
    return [name.encode() for name in EDGE_CASES + generated] + BAD_UTF8
