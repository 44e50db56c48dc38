"""A value that must never be shown (the auth token): in no repr, log line or error."""

from __future__ import annotations


class Secret:
    """``repr``/``str`` hide the value; :meth:`reveal` returns it."""

    __slots__ = ("_value",)

    def __init__(self, value: str):
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)
