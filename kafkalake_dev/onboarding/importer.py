"""``kafkalake catalog import``: the catalog files a human would have written for the cluster's topics.

Per Kafka topic of the environment: its place in the catalog by the environment's naming convention
(``kafkalake.convention``), its value format from the bytes of a sample (``onboarding.infer.sampled_format``: most
values Confluent-framed → the registry's schemaType for their ids (``framed_problem``), most JSON → JSON; the
registry decides only when nothing was sampled; a Protobuf topic's message from the sampled indexes), its schemas
(every version of a registered value subject; for JSON without one, an Avro schema inferred from the sample), its
ranked business-time candidates with their evidence (``kafkalake_dev.onboarding.infer``), whether the sample had
keys and tombstones, and its keys' format when they are framed (``infer.framed_key``). Topics off the convention are
summarised by reason (``off_convention_lines``). The sample is read with ``assign`` from each partition's start: the
client needs a ``group.id``, but it never joins the group and never commits an offset. ``write_proposals`` never
overwrites a file: a file that exists and differs is shown as a diff.

Past 400 lines on purpose: reading the sample, deciding the proposal and writing its files are the import's steps
in order, each small, over the same ``Sample`` and ``Proposal``; the decisions that need no I/O are in ``infer``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import fnmatch
import io
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

import fastavro
import yaml
from confluent_kafka import Consumer, TopicPartition
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import DecodeError, Message

from kafkalake.convention import OffConvention, TopicName, parse_topic_name
from kafkalake.drift import ClusterView
from kafkalake.kafka import watermarks
from kafkalake.kafka_access import KafkaAccess
from kafkalake.protobuf_schema import ProtoSchema, read_index
from kafkalake.registered_formats import ROOT_NAME, protobuf_columns
from kafkalake.registry import RegisteredSchema, key_subject, value_subject
from kafkalake.topic_catalog import TopicCatalog
from kafkalake.topic_spec import ValueFormat
from kafkalake.wire import split_header
from kafkalake_dev.onboarding.infer import (
    REGISTRY_FORMATS,
    NotInferable,
    RankedTime,
    SampledFormat,
    framed_key,
    infer_avro,
    rank_time_fields,
    sampled_format,
)

SAMPLE_RECORDS: Final = 200
"""Records sampled per topic (spread over its partitions)."""
SAMPLE_SECONDS: Final = 20.0
SAMPLE_GROUP: Final = "kafkalake-catalog-import"
"""librdkafka requires a group id; an assigned consumer that never commits leaves no offset under it."""
ANY: Final = "google.protobuf.Any"
OFF_CONVENTION_EXAMPLES: Final = 3
"""Topics named per reason in the summary of those off the naming convention."""


@dataclass
class Sample:
    """What a sample of a topic's records showed."""

    values: list[bytes] = field(default_factory=list)
    records: int = 0
    keys: int = 0
    tombstones: int = 0
    key_ids: Counter[int] = field(default_factory=Counter)
    """The schema ids of the sampled keys in Confluent's frame (a magic byte, then the id)."""


def read_sample(access: KafkaAccess, kafka_topic: str, limit: int = SAMPLE_RECORDS) -> Sample:
    """Up to ``limit`` records from the start of the topic's partitions, committing nothing."""
    consumer = Consumer(
        {
            **access.client_config(),
            "group.id": SAMPLE_GROUP,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        }
    )
    sample = Sample()
    try:
        partitions = consumer.list_topics(kafka_topic, timeout=10).topics[kafka_topic].partitions
        ends = {p: watermarks(consumer, TopicPartition(kafka_topic, p)) for p in partitions}
        share = max(1, limit // max(1, len(ends)))
        wanted = {p: min(high, low + share) for p, (low, high) in ends.items() if high > low}
        consumer.assign([TopicPartition(kafka_topic, p, ends[p][0]) for p in wanted])
        deadline = time.monotonic() + SAMPLE_SECONDS
        while wanted and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None or message.error() is not None:
                continue
            partition, offset = message.partition(), message.offset()
            if partition in wanted and offset is not None and offset < wanted[partition]:
                _count(sample, message.key(), message.value())
                if offset + 1 >= wanted[partition]:
                    del wanted[partition]
    finally:
        consumer.close()
    return sample


def _count(sample: Sample, key: bytes | None, value: bytes | None) -> None:
    sample.records += 1
    if key is not None:
        sample.keys += 1
        with contextlib.suppress(ValueError):  # a key not in Confluent's frame
            sample.key_ids[split_header(key)[0]] += 1
    if value is None:
        sample.tombstones += 1
    else:
        sample.values.append(value)


def decode_framed(
    values: list[bytes], registered: tuple[RegisteredSchema, ...], value_format: ValueFormat
) -> list[Any]:
    """The sampled values written with one of ``registered``, decoded (others left out): Avro with fastavro, Protobuf
    as its message (``RegisteredSchema.decoding``) in JSON form with the fields' own names, JSON Schema's JSON."""
    readers = {r.schema_id: _reader(r, value_format) for r in registered}
    decoded = []
    for value in values:
        try:
            schema_id, payload = split_header(value)
            if schema_id in readers:
                decoded.append(readers[schema_id](payload))
        except (ValueError, EOFError, StopIteration, DecodeError):
            continue
    return decoded


def _reader(version: RegisteredSchema, value_format: ValueFormat) -> Callable[[bytes], Any]:
    if value_format == ValueFormat.JSON_SCHEMA:
        return json.loads
    if value_format == ValueFormat.PROTOBUF:
        schema, message = ProtoSchema(version.decoding.descriptor_set, ROOT_NAME), version.decoding.message
        message_class, index = schema.message_class(message), version.decoding.index

        def protobuf(payload: bytes) -> Any:
            if not payload.startswith(index):
                raise ValueError("another message's index")
            found = without_any(message_class.FromString(payload[len(index) :]))
            return MessageToDict(found, preserving_proto_field_name=True)

        return protobuf
    parsed = fastavro.parse_schema(json.loads(version.schema))
    return lambda payload: fastavro.schemaless_reader(io.BytesIO(payload), parsed, None)


def without_any(message: Message) -> Message:
    """``message`` with its ``google.protobuf.Any`` fields cleared, at any depth: ``MessageToDict`` looks up the type
    an ``Any`` packs and fails on one no registered file declares, and the import reads no time from one."""
    for described, value in message.ListFields():
        if described.message_type is None:
            continue
        if described.message_type.full_name == ANY:
            message.ClearField(described.name)
        elif described.message_type.GetOptions().map_entry:
            entry = described.message_type.fields_by_name["value"]
            if entry.message_type is not None:
                for item in value.values():
                    without_any(item)
        elif described.label == described.LABEL_REPEATED:
            for item in value:
                without_any(item)
        else:
            without_any(value)
    return message


def sampled_message(values: list[bytes], registered: tuple[RegisteredSchema, ...]) -> str | None:
    """The message type most sampled Protobuf values carry, by the index after their schema id (None: each version's
    file's first message, the registry's default rendering, whatever message ``registered`` were rendered with)."""
    schemas = {r.schema_id: ProtoSchema(r.decoding.descriptor_set, ROOT_NAME) for r in registered}
    by_path = {i: {p: n for n, p in schema.messages.items()} for i, schema in schemas.items()}
    names: Counter[str] = Counter()
    for value in values:
        try:
            schema_id, payload = split_header(value)
            names[by_path[schema_id][read_index(payload)[0]]] += 1
        except (ValueError, KeyError):
            continue
    if not names:
        return None
    name = names.most_common(1)[0][0]
    return None if all(next(iter(s.messages), None) == name for s in schemas.values()) else name


def with_message(version: RegisteredSchema, message: str | None) -> RegisteredSchema:
    """A Protobuf version's columns and decoding for message ``message`` (else its file's first), as the archiver
    renders them for a topic whose catalog names it (or names none)."""
    columns, decoding = protobuf_columns(ProtoSchema(version.decoding.descriptor_set, ROOT_NAME), message)
    return dataclasses.replace(version, schema=columns, decoding=decoding)


def framed_problem(kafka_topic: str, found: SampledFormat, registered: tuple[RegisteredSchema, ...]) -> str | None:
    """Why mostly framed values give no format: no value subject, or schema ids it does not hold (None: neither)."""
    subject = value_subject(kafka_topic)
    if found.mostly_framed and not registered:
        return (
            f"Confluent-framed values ({found.evidence()}), but no value subject in the registry: register the "
            f"topic's value schema under subject {subject!r} (TopicNameStrategy), then import again"
        )
    if found.mostly_framed and found.unregistered:
        return (
            f"Confluent-framed values carry schema ids {', '.join(map(str, found.unregistered))} that no version of "
            f"value subject {subject!r} has ({', '.join(f'v{r.version} id {r.schema_id}' for r in registered)}), so "
            f"the registry gives no format for them and the archiver would quarantine them as unknown_schema_id "
            f"({found.evidence()}): register their schemas under {subject!r} (TopicNameStrategy), then import again"
        )
    return None


def protobuf_versions(
    values: list[bytes], registered: tuple[RegisteredSchema, ...]
) -> tuple[str | None, tuple[RegisteredSchema, ...]] | str:
    """The sampled values' message (None: each file's first) and ``registered`` rendered with it, or why not: a
    version whose file lacks the message."""
    message = sampled_message(values, registered)
    messages = {r.version: ProtoSchema(r.decoding.descriptor_set, ROOT_NAME).messages for r in registered}
    lacking = [f"v{number}" for number, declared in messages.items() if message and message not in declared]
    if lacking:
        return (
            f"the sampled records are {message} messages, which the file of {', '.join(lacking)} does not declare: "
            "one topic's versions must all declare its message; write the topic's catalog files by hand"
        )
    return message, tuple(with_message(r, message) for r in registered)


class WriteOutcome(StrEnum):
    """What writing a proposed file did, or would do in a dry run."""

    WRITTEN = "written"
    UNCHANGED = "unchanged"
    WOULD_CHANGE = "would change (not written)"
    WOULD_WRITE = "would write"


@dataclass(frozen=True)
class Proposal:
    """The files one topic's catalog entry would consist of, and the candidates behind its time fields."""

    name: TopicName
    files: dict[Path, str]
    value_format: ValueFormat
    format_evidence: str
    """What the format was decided on: the sampled bytes (``SampledFormat.evidence``) and the registry."""
    times: tuple[RankedTime, ...]
    sample: Sample


@dataclass(frozen=True)
class Flagged:
    """A topic the import writes nothing for, and why."""

    kafka_topic: str
    reason: str


def propose(
    name: TopicName,
    *,
    env: str,
    root: Path,
    catalog: TopicCatalog,
    registered: tuple[RegisteredSchema, ...],
    sample: Sample,
    key_registered: tuple[RegisteredSchema, ...] = (),
) -> Proposal | Flagged:
    """The catalog files for one topic (pure: the registry's versions of its value and key subjects and the sample
    are given)."""
    known = next((t for t in catalog.for_env(env) if t.kafka_topic == name.kafka_topic), None)
    folder = known.source.parent if known else root / name.company / name.domain / env
    stem = known.name if known else name.topic
    namespace = f"{name.company}.{name.domain}".replace("-", "_")
    found = sampled_format(sample.values, registered)
    problem = framed_problem(name.kafka_topic, found, registered)
    if problem:
        return Flagged(name.kafka_topic, problem)
    if found.value_format is None and sample.values:
        if not (registered or found.framed or found.json_values):
            return Flagged(name.kafka_topic, "no value subject in the registry, and the values are not JSON")
        return Flagged(name.kafka_topic, f"the sampled bytes show no one format ({found.evidence()})")
    subject = f"a value subject with {len(registered)} version(s)" if registered else "no value subject"
    evidence = f"{found.evidence()}; {subject} in the registry"
    newest = REGISTRY_FORMATS.get(registered[-1].schema_type) if registered else None
    value_format = found.value_format or newest or ValueFormat.JSON
    message = None
    if value_format != ValueFormat.JSON:
        if value_format == ValueFormat.PROTOBUF:
            chosen = protobuf_versions(sample.values, registered)
            if isinstance(chosen, str):
                return Flagged(name.kafka_topic, chosen)
            message, registered = chosen
        records = decode_framed(sample.values, registered, value_format)
    else:
        records = list(found.json_values)
    schemas = [json.loads(r.schema) for r in registered]
    if not schemas:
        try:
            schemas = [infer_avro(records, name.topic, namespace)]
        except NotInferable as exc:
            return Flagged(name.kafka_topic, f"JSON without a registered schema, and {exc}: write its .avsc by hand")
    times = tuple(rank_time_fields(schemas[-1], records))
    yaml_text = topic_yaml(
        name,
        env,
        value_format=value_format,
        format_evidence=evidence,
        times=times,
        sample=sample,
        message=message,
        key_format=framed_key(sample.key_ids, sample.keys, key_registered),
    )
    files = {folder / f"{stem}.yaml": yaml_text}
    for number, schema in enumerate(schemas, 1):
        files[folder / f"{stem}.v{number}.avsc"] = json.dumps(schema, indent=2) + "\n"
    return Proposal(name, files, value_format, evidence, times, sample)


def topic_yaml(
    name: TopicName,
    env: str,
    *,
    value_format: ValueFormat,
    format_evidence: str,
    times: tuple[RankedTime, ...],
    sample: Sample,
    message: str | None = None,
    key_format: ValueFormat | None = None,
) -> str:
    """The topic file, with what the import saw as comments for the reviewer; with ``key_format`` (``framed_key``)
    the keys are kept decoded."""
    spec: dict[str, Any] = {"description": f"Imported from Kafka topic {name.kafka_topic}; describe it."}
    if name.kafka_topic != f"{env}.{name.company}.{name.domain}.{name.topic}":
        spec["kafka_topic"] = name.kafka_topic
    spec["value_format"] = value_format.value
    if message:
        spec["message"] = message
    if key_format:
        spec["key_format"] = key_format.value
    spec["time_fields"] = [t.candidate.model_dump(mode="json", exclude_defaults=True) for t in times]
    if sample.tombstones:
        spec["tombstones"] = "keep"
    if sample.tombstones or key_format:
        spec["archive"] = {"key": "clear"}
    comments = [
        f"Written by `kafkalake catalog import` from {name.kafka_topic}: review it before merging.",
        f"Sampled {sample.records} records: {sample.keys} with a key, {sample.tombstones} tombstones.",
        f"Value format {value_format}: {format_evidence}.",
        "Business-time candidates, best first (score 3 = Avro timestamp type, 2 = name and sample, 1 = name only):",
        *(
            f"  {t.candidate.path} ({t.candidate.format}{f', {t.candidate.unit}' if t.candidate.unit else ''}): "
            f"score {t.score}, {t.evidence}"
            for t in times
        ),
    ]
    if key_format:
        comments.append(
            f"Keys: {sum(sample.key_ids.values())} of {sample.keys} framed with the key subject's schema ids: "
            f"key_format {key_format}, each stored decoded as _key (remove key_format to keep the bytes)."
        )
    if not times:
        comments.append("  none found: the archiver uses the Kafka timestamp; add time_fields if the records have one.")
    if sample.tombstones:
        comments.append("Tombstones were seen: kept as a delete log with the record key; set tombstones: drop if not.")
    header = "".join(f"# {line}\n" for line in comments)
    return header + str(yaml.safe_dump(spec, sort_keys=False, default_flow_style=None, width=120))


@dataclass(frozen=True)
class ImportResult:
    proposals: list[Proposal]
    flagged: list[Flagged]
    off_convention: list[OffConvention]


def off_convention_lines(off: list[OffConvention], examples: int = OFF_CONVENTION_EXAMPLES) -> list[str]:
    """The topics off the naming convention summarised: a count per reason (most frequent first), each with up to
    ``examples`` of its topics (in name order) and their particular reasons."""
    by_kind: dict[str, list[OffConvention]] = {}
    for topic in sorted(off, key=lambda o: o.kafka_topic):
        by_kind.setdefault(topic.kind, []).append(topic)
    lines = [f"{len(off)} topics off the naming convention, not imported:"] if off else []
    for kind, topics in sorted(by_kind.items(), key=lambda item: (-len(item[1]), item[0])):
        hidden = len(topics) - examples
        lines.append(f"  {len(topics)} {kind}{f' ({hidden} more not shown)' if hidden > 0 else ''}:")
        lines += [f"    not imported: {t.kafka_topic}: {t.reason}" for t in topics[:examples]]
    return lines


def import_topics(
    access: KafkaAccess, view: ClusterView, *, env: str, convention: str, root: Path, catalog: TopicCatalog, match: str
) -> ImportResult:
    """A proposal (or the reason for none) for every topic of ``view`` whose name matches the glob ``match``."""
    result = ImportResult([], [], [])
    for kafka_topic in view.topics:
        if not fnmatch.fnmatchcase(kafka_topic, match):
            continue
        parsed = parse_topic_name(kafka_topic, env, convention)
        if isinstance(parsed, OffConvention):
            result.off_convention.append(parsed)
            continue
        sample = read_sample(access, kafka_topic)
        registered = view.versions.get(kafka_topic, ())
        keyed = tuple(access.registry().versions(key_subject(kafka_topic))) if sample.key_ids else ()
        found = propose(
            parsed, env=env, root=root, catalog=catalog, registered=registered, sample=sample, key_registered=keyed
        )
        if isinstance(found, Proposal):
            result.proposals.append(found)
        else:
            result.flagged.append(found)
    return result


def write_proposals(proposals: list[Proposal], *, dry_run: bool = False) -> Iterator[tuple[Path, WriteOutcome, str]]:
    """Write each proposed file that does not exist yet; (path, action, unified diff for a file that differs)."""
    for proposal in proposals:
        for path, text in proposal.files.items():
            if not path.exists():
                if not dry_run:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(text)
                yield path, WriteOutcome.WOULD_WRITE if dry_run else WriteOutcome.WRITTEN, ""
            elif _same(path, text):
                yield path, WriteOutcome.UNCHANGED, ""
            else:
                diff = difflib.unified_diff(
                    path.read_text().splitlines(), text.splitlines(), str(path), "import", lineterm=""
                )
                yield path, WriteOutcome.WOULD_CHANGE, "\n".join(diff)


def _same(path: Path, text: str) -> bool:
    existing = path.read_text()
    if path.suffix == ".avsc":
        try:
            return bool(json.loads(existing) == json.loads(text))
        except json.JSONDecodeError:
            return False
    return existing == text
