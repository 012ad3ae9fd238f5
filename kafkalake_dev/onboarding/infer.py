"""What ``kafkalake catalog import`` concludes from a topic's schema and a sample of its records: the value format
its bytes show, an Avro schema inferred from JSON values, and the business-time candidates ranked with the evidence
for each. Pure: the sample is read by ``kafkalake_dev.onboarding.importer``.

Format: a value in Confluent framing (magic byte 0, then a 4-byte schema id) is of the registry's ``schemaType`` for
that id (Avro, Protobuf or JSON Schema; no format when the value subject holds no such id: never a guess from the
subject alone), a value that parses as JSON is JSON (no JSON text starts with byte 0, so no value is both); the
topic's format is the one most sampled values have.

Ranking: an Avro timestamp logical type first (score 3), then a field whose name says time (``*_at``, ``*_at_ms``,
``*time*``, ``timestamp``, ``ts``, ``*date*``, ``created*``, ``occurred*``, ...) and whose sampled values are all
plausible times (score 2: epoch numbers in one unit between 2000 and 2100, or ISO 8601 strings), then such a name
with no sample to confirm it (score 1; epoch fields only when the name gives the unit). Ties: event-like names
before update-like ones, shallow before nested.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from kafkalake.personal import schema_fields, within_collection
from kafkalake.registry import RegisteredSchema
from kafkalake.topic_spec import TimeCandidate, TimeFormat, ValueFormat
from kafkalake.wire import split_header

TIME_NAME: Final = re.compile(
    r"(_at$|_at_|time|timestamp|^ts$|_ts$|^ts_|date|created|occurred|updated|modified|emitted|published)",
    re.IGNORECASE,
)
LATER_NAMES: Final = re.compile(r"updated|modified|changed|ingest|received|processed|expires|deleted", re.IGNORECASE)
EPOCH_UNITS: Final = (("s", 1), ("ms", 1_000), ("us", 1_000_000), ("ns", 1_000_000_000))
UNIT_SUFFIX: Final = {
    "s": ("_s", "_sec", "_secs", "_seconds", "_epoch"),
    "ms": ("_ms", "_millis"),
    "us": ("_us", "_micros"),
    "ns": ("_ns", "_nanos"),
}
PLAUSIBLE: Final = (datetime(2000, 1, 1, tzinfo=UTC).timestamp(), datetime(2100, 1, 1, tzinfo=UTC).timestamp())
AVRO_TIMESTAMPS: Final = frozenset({"timestamp-millis", "timestamp-micros", "timestamp-nanos"})
JSON_TYPES: Final = {bool: "boolean", int: "long", float: "double", str: "string"}


@dataclass(frozen=True)
class SampledFormat:
    """What the bytes of a topic's sampled values say about its value format."""

    framed: int
    """Values in Confluent framing: magic byte 0, then a 4-byte schema id."""
    schema_ids: tuple[int, ...]
    """The schema ids the framed values name, ascending."""
    json_values: tuple[Any, ...]
    """The values that parse as JSON, parsed."""
    neither: int
    schema_types: tuple[str, ...] = ()
    """The registry's ``schemaType`` of the sampled schema ids it holds, distinct, sorted."""
    unregistered: tuple[int, ...] = ()
    """The sampled schema ids that no given registered version has (every one when no version was given)."""

    @property
    def mostly_framed(self) -> bool:
        """More sampled values are Confluent-framed than JSON."""
        return self.framed > len(self.json_values)

    @property
    def value_format(self) -> ValueFormat | None:
        """The format most sampled values have; None when no value was sampled, none is framed or JSON, as many are
        framed as are JSON, or the framed ones name schemas of several types or ids the registered versions lack."""
        if self.mostly_framed:
            if self.unregistered or len(self.schema_types) != 1:
                return None
            return REGISTRY_FORMATS.get(self.schema_types[0])
        if len(self.json_values) > self.framed:
            return ValueFormat.JSON
        return None

    def evidence(self) -> str:
        """The counts behind the format, for the reviewer (``3 sampled values: 2 JSON, 1 neither framed nor JSON``)."""
        total = self.framed + len(self.json_values) + self.neither
        if total == 0:
            return "no sampled value"
        ids = ", ".join(map(str, self.schema_ids))
        counts = [
            f"{self.framed} Confluent-framed (schema ids {ids}{self._types()})" if self.framed else "",
            f"{len(self.json_values)} JSON" if self.json_values else "",
            f"{self.neither} neither framed nor JSON" if self.neither else "",
        ]
        return f"{total} sampled values: {', '.join(c for c in counts if c)}"

    def _types(self) -> str:
        return f", registry schemaType {' and '.join(self.schema_types)}" if self.schema_types else ""


REGISTRY_FORMATS: Final = {f.schema_type: f for f in ValueFormat if f.schema_type}
"""The value format of each registry ``schemaType``."""


def sampled_format(values: list[bytes], registered: Sequence[RegisteredSchema] = ()) -> SampledFormat:
    """Each sampled value classified by its bytes: Confluent-framed (of the ``registered`` version's type its schema
    id names), JSON, or neither."""
    ids: list[int] = []
    parsed: list[Any] = []
    for value in values:
        try:
            ids.append(split_header(value)[0])
        except ValueError:
            with contextlib.suppress(UnicodeDecodeError, json.JSONDecodeError):
                parsed.append(json.loads(value))
    neither = len(values) - len(ids) - len(parsed)
    types = tuple(sorted({r.schema_type for r in registered if r.schema_id in ids}))
    unregistered = tuple(sorted(set(ids) - {r.schema_id for r in registered}))
    return SampledFormat(len(ids), tuple(sorted(set(ids))), tuple(parsed), neither, types, unregistered)


def framed_key(key_ids: Mapping[int, int], keys: int, key_registered: Sequence[RegisteredSchema]) -> ValueFormat | None:
    """The keys' format (``key_format``) when most of the ``keys`` sampled are framed with schema ids of the key
    subject (``key_ids``: sampled keys per framed id; ``key_registered``: the subject's versions), else None: the
    keys stay bytes."""
    ids = {v.schema_id for v in key_registered}
    if not key_registered or sum(n for i, n in key_ids.items() if i in ids) * 2 <= keys:
        return None
    return REGISTRY_FORMATS.get(key_registered[-1].schema_type)


@dataclass(frozen=True)
class RankedTime:
    """A business-time candidate, how sure the import is (3 best) and why."""

    candidate: TimeCandidate
    score: int
    evidence: str


def value_at(record: Any, path: str) -> Any:
    """The value at a dotted path of a decoded record (None where any part is missing)."""
    for part in path.split("."):
        record = record.get(part) if isinstance(record, dict) else None
    return record


def _plain_type(avro_type: Any) -> Any:
    """A field's type without ``null`` (the only other branch of a nullable union)."""
    if isinstance(avro_type, list):
        branches = [b for b in avro_type if b != "null"]
        return branches[0] if len(branches) == 1 else avro_type
    return avro_type


def _epoch_unit(values: list[float]) -> str | None:
    """The one unit in which every value is a time between 2000 and 2100."""
    low, high = PLAUSIBLE
    units = [unit for unit, factor in EPOCH_UNITS if all(low <= v / factor <= high for v in values)]
    return units[0] if len(units) == 1 else None


def _iso(value: Any) -> bool:
    try:
        datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _moment(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


def _candidate(path: str, kind: Any, values: list[Any]) -> RankedTime | None:
    """The candidate one field makes, or None."""
    if isinstance(kind, dict) and kind.get("logicalType") in AVRO_TIMESTAMPS:
        logical = kind["logicalType"]
        return RankedTime(TimeCandidate(path=path, format=TimeFormat.AVRO_TIMESTAMP), 3, f"Avro logical type {logical}")
    base = kind.get("type") if isinstance(kind, dict) else kind
    if not TIME_NAME.search(path.rsplit(".", 1)[-1]):
        return None
    if base == "string":
        return _iso_candidate(path, values)
    if base in ("int", "long", "double", "float"):
        return _epoch_candidate(path, values)
    return None


def _iso_candidate(path: str, values: list[Any]) -> RankedTime | None:
    candidate = TimeCandidate(path=path, format=TimeFormat.ISO8601)
    if not values:
        return RankedTime(candidate, 1, "name only; no sampled value")
    if all(_iso(v) for v in values):
        return RankedTime(
            candidate, 2, f"{len(values)} sampled values parse as ISO 8601, e.g. {min(map(str, values))!r}"
        )
    return None


def _epoch_candidate(path: str, values: list[Any]) -> RankedTime | None:
    numbers = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if numbers:
        unit = _epoch_unit(numbers)
        if unit is None:
            return None
        factor = dict(EPOCH_UNITS)[unit]
        low, high = min(numbers), max(numbers)
        evidence = (
            f"{len(numbers)} sampled values {low:.0f}..{high:.0f} are times only in {unit}: "
            f"{_moment(low / factor)} .. {_moment(high / factor)}"
        )
        return RankedTime(TimeCandidate(path=path, format=TimeFormat.EPOCH, unit=unit), 2, evidence)
    name = path.rsplit(".", 1)[-1].lower()
    named = next((u for u, suffixes in UNIT_SUFFIX.items() if name.endswith(suffixes)), None)
    if named is None:
        return None
    candidate = TimeCandidate(path=path, format=TimeFormat.EPOCH, unit=named)
    return RankedTime(candidate, 1, f"name only (unit {named} from its suffix); no sampled value")


def rank_time_fields(schema: dict[str, Any], records: Iterable[Any]) -> list[RankedTime]:
    """Every business-time candidate of a record schema, best first, judged on the sampled decoded ``records``."""
    sample = list(records)
    found = []
    for path, avro_field in schema_fields(schema):
        if within_collection(path):
            continue  # a row holds any number of such values: none is the row's business time
        values = [v for v in (value_at(r, path) for r in sample) if v is not None]
        ranked = _candidate(path, _plain_type(avro_field["type"]), values)
        if ranked is not None:
            found.append(ranked)

    def order(item: RankedTime) -> tuple[int, bool, int, str]:
        path = item.candidate.path
        return (-item.score, bool(LATER_NAMES.search(path)), path.count("."), path)

    return sorted(found, key=order)


def avro_name(raw: str) -> str:
    """A legal Avro name in PascalCase (``card-authorized`` → ``CardAuthorized``)."""
    name = "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", raw) if part)
    return name if name[:1].isalpha() else f"T{name}"


class NotInferable(ValueError):
    """The sample gives no Avro schema; the message says why."""


def infer_avro(records: list[Any], name: str, namespace: str) -> dict[str, Any]:
    """An Avro record schema every sampled JSON object fits: fields missing from some records or null in some
    are optional (``["null", T]``, default null), integers mixed with decimals are doubles."""
    if not records:
        raise NotInferable("no records to infer a schema from")
    if not all(isinstance(r, dict) for r in records):
        raise NotInferable("the values are not all JSON objects")
    return {"type": "record", "name": avro_name(name), "namespace": namespace, **_record_fields(records, "")}


def _record_fields(records: list[dict[str, Any]], path: str) -> dict[str, Any]:
    names = list(dict.fromkeys(key for record in records for key in record))
    fields = []
    for key in names:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise NotInferable(f"field {path}{key!r} is not a legal Avro name")
        values = [r.get(key) for r in records]
        kind = _merged_type([v for v in values if v is not None], f"{path}{key}")
        if any(v is None for v in values):
            fields.append({"name": key, "type": ["null", kind], "default": None})
        else:
            fields.append({"name": key, "type": kind})
    return {"fields": fields}


def _merged_type(values: list[Any], path: str) -> Any:
    if not values:
        return "string"
    if all(isinstance(v, dict) for v in values):
        return {"type": "record", "name": avro_name(path), **_record_fields(values, f"{path}.")}
    if all(isinstance(v, list) for v in values):
        return {"type": "array", "items": _merged_type([i for v in values for i in v], f"{path}_item")}
    kinds = {JSON_TYPES.get(type(v), "?") for v in values}
    if kinds == {"long", "double"}:
        return "double"
    if len(kinds) == 1 and "?" not in kinds:
        return kinds.pop()
    raise NotInferable(f"field {path} has values of several types ({', '.join(sorted(kinds))})")
