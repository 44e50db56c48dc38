"""The schema a topic's producers declare (``--schema``): what typed consumers expect.

The daemon forwards payloads byte for byte and never encodes them: the schema only
tells the broker what the payloads are, so consumers that read with a schema and
namespaces that enforce one take the topic.  ``json:`` and ``avro:`` name a file
holding an Avro record schema, checked here at start, so a typo stops the daemon
with one line instead of a broker refusal at the first message.  Sans-IO: the
caller reads the file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class SchemaKind(StrEnum):
    BYTES = "bytes"  # no schema declared, as the Java client does for Schema.BYTES
    STRING = "string"
    JSON = "json"
    AVRO = "avro"


#: What the Java client's JSONSchema and AvroSchema declare by default
#: (``SchemaDefinitionBuilderImpl``: ``alwaysAllowNull`` true, ``jsr310ConversionEnabled`` false).
STRUCT_PROPERTIES: tuple[tuple[str, str], ...] = (
    ("__alwaysAllowNull", "true"),
    ("__jsr310ConversionEnabled", "false"),
)


@dataclass(frozen=True, slots=True)
class ProducerSchema:
    """A schema as declared in ``CommandProducer``; ``spec`` is how it was configured."""

    kind: SchemaKind = SchemaKind.BYTES
    #: The compact JSON of the Avro record schema (json, avro); empty otherwise.
    definition: bytes = b""
    properties: tuple[tuple[str, str], ...] = ()
    spec: str = "bytes"

    @property
    def declared(self) -> bool:
        """Whether the producer sends a schema at all (bytes sends none, like Java's BYTES)."""
        return self.kind is not SchemaKind.BYTES

    @property
    def name(self) -> str:
        """The name the Java client gives it: ``String``, or empty for struct schemas."""
        return "String" if self.kind is SchemaKind.STRING else ""

    def __str__(self) -> str:
        return self.spec

    @classmethod
    def parse(cls, spec: str, read: Callable[[str], bytes]) -> ProducerSchema:
        """``bytes``, ``string``, ``json:FILE`` or ``avro:FILE``; ``read(FILE)`` returns the
        file's bytes or raises ``ValueError`` saying why not."""
        word, colon, path = spec.partition(":")
        kind = word.strip().lower()
        if not colon and kind in (SchemaKind.BYTES, SchemaKind.STRING):
            return cls(SchemaKind(kind), spec=kind)
        if not colon or kind not in (SchemaKind.JSON, SchemaKind.AVRO) or not path.strip():
            raise ValueError(f"expected bytes, string, json:FILE or avro:FILE, got {spec!r}")
        path = path.strip()
        text = read(path)
        try:
            document = json.loads(text.decode("utf-8"))
        except UnicodeDecodeError:
            raise ValueError(f"{path}: not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not JSON ({exc})") from None
        try:
            check_record_schema(document)
        except ValueError as exc:
            raise ValueError(f"{path}: not an Avro record schema: {exc}") from None
        compact = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
        return cls(SchemaKind(kind), compact.encode(), STRUCT_PROPERTIES, f"{kind}:{path}")


#: The default: no schema declared.
NO_SCHEMA = ProducerSchema()

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_record_schema(document: Any) -> None:
    """``ValueError`` (saying where) unless ``document`` is an Avro record schema: what
    Avro's own parser accepts, defaults aside (Pulsar does not check those either)."""
    if not isinstance(document, dict) or document.get("type") != "record":
        raise ValueError('expected a JSON object with "type": "record"')
    _Checker().schema(document, "", "")


class _Checker:
    """One pass over a schema: names, fields, unions, references to named types."""

    def __init__(self) -> None:
        self.named: set[str] = set()

    def schema(self, node: Any, namespace: str, where: str) -> str:
        """Check ``node``; return what it is for a union's duplicate check."""
        if isinstance(node, str):
            return self._reference(node, namespace, where)
        if isinstance(node, list):
            return self._union(node, namespace, where)
        if not isinstance(node, dict):
            raise ValueError(f"{where or 'schema'}: expected a type name, object or list")
        kind = node.get("type")
        if not isinstance(kind, str):
            raise ValueError(f'{where or "schema"}: "type" must be a string')
        if kind in ("record", "error", "enum", "fixed"):
            return self._named(node, kind, namespace, where)
        if kind == "array":
            self.schema(self._required(node, "items", where), namespace, f"{where}.items")
        elif kind == "map":
            self.schema(self._required(node, "values", where), namespace, f"{where}.values")
        else:
            return self._reference(kind, namespace, where)
        return kind

    def _named(self, node: dict[str, Any], kind: str, namespace: str, where: str) -> str:
        name = self._required(node, "name", where)
        if not isinstance(name, str):
            raise ValueError(f'{where or "schema"}: "name" must be a string')
        space = (node.get("namespace", namespace) or "") if "." not in name else ""
        if not isinstance(space, str) or (
            space and not all(map(_NAME.fullmatch, space.split(".")))
        ):
            raise ValueError(f"{where or 'schema'}: invalid namespace {space!r}")
        full = f"{space}.{name}" if space else name
        if not all(_NAME.fullmatch(part) for part in full.split(".")):
            raise ValueError(f"{where or 'schema'}: invalid name {name!r}")
        if full in self.named or full in _PRIMITIVES:
            raise ValueError(f"{where or 'schema'}: {full!r} is defined twice")
        self.named.add(full)
        inner = full.rpartition(".")[0]
        at = f"{where}{'.' if where else ''}{name}"
        if kind in ("record", "error"):
            self._fields(self._required(node, "fields", where), inner, at)
        elif kind == "enum":
            symbols = self._required(node, "symbols", where)
            if (
                not isinstance(symbols, list)
                or not all(isinstance(s, str) and _NAME.fullmatch(s) for s in symbols)
                or len(set(symbols)) != len(symbols)
            ):
                raise ValueError(f"{at}: symbols must be a list of distinct names")
        else:
            size = self._required(node, "size", where)
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise ValueError(f"{at}: size must be a non-negative integer")
        return full

    def _fields(self, fields: Any, namespace: str, where: str) -> None:
        if not isinstance(fields, list):
            raise ValueError(f'{where}: "fields" must be a list')
        seen: set[str] = set()
        for index, field in enumerate(fields):
            at = f"{where}.fields[{index}]"
            if not isinstance(field, dict):
                raise ValueError(f"{at}: expected an object")
            name = self._required(field, "name", at)
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise ValueError(f"{at}: invalid field name {name!r}")
            if name in seen:
                raise ValueError(f"{at}: field {name!r} appears twice")
            seen.add(name)
            self.schema(self._required(field, "type", at), namespace, f"{where}.{name}")

    def _union(self, branches: list[Any], namespace: str, where: str) -> str:
        if not branches:
            raise ValueError(f"{where}: an empty union")
        kinds: set[str] = set()
        for index, branch in enumerate(branches):
            if isinstance(branch, list):
                raise ValueError(f"{where}[{index}]: a union directly inside a union")
            kind = self.schema(branch, namespace, f"{where}[{index}]")
            if kind in kinds:
                raise ValueError(f"{where}: {kind!r} appears twice in the union")
            kinds.add(kind)
        return "union"

    def _reference(self, name: str, namespace: str, where: str) -> str:
        if name in _PRIMITIVES:
            return name
        candidates = [f"{namespace}.{name}"] if namespace and "." not in name else []
        candidates.append(name)
        for candidate in candidates:
            if candidate in self.named:
                return candidate
        raise ValueError(f"{where or 'schema'}: unknown type {name!r}")

    @staticmethod
    def _required(node: dict[str, Any], key: str, where: str) -> Any:
        if key not in node:
            raise ValueError(f'{where or "schema"}: "{key}" is missing')
        return node[key]
