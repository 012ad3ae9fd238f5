"""The topic catalog: ``catalog/<company>/<domain>/<environment>/<topic>.yaml`` plus Avro schemas beside it.

Everything kafkalake does per topic (Kafka topic name, S3 prefix, Glue database/table/crawler names,
business-time candidates, formats, policies) is derived here from those files and overridable defaults.
Validation collects *every* problem with its file, field and a fix before anything runs.

What a topic file may say is ``kafkalake.topic_spec``; here are the derived topic, the loader and its validation
messages, so a new catalog key is added in one and validated and derived in the other. The file is past 400
lines for that reason: splitting the loader from its messages would put one check in two places.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
import yaml
from pydantic import ValidationError

from kafkalake.glue import CrawlerSpec
from kafkalake.layout import NAME_PATTERN, LayoutError, TablePrefix, to_segment
from kafkalake.lftags import personal_columns
from kafkalake.naming import TableInference, crawler_name_for, default_names
from kafkalake.personal import (
    HEADERS_COLUMN,
    KAFKA_KEY_COLUMN,
    UPSERT_KEY_COLUMN,
    PiiAction,
    QuarantineMode,
    action_refusal,
    needs_key,
    schema_paths,
    schema_personal_fields,
    within_collection,
)
from kafkalake.s3_location import s3_uri
from kafkalake.topic_spec import Envelope, StoredAs, TableFormat, TableMode, TopicSpec

ATHENA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,254}$")
DEFAULTS_FILE = "defaults.yaml"


@dataclass(frozen=True)
class Topic:
    """A topic with everything derived: what every component uses."""

    name: str
    company: str
    domain: str
    env: str
    spec: TopicSpec
    schemas: tuple[str, ...]
    """Avro schema texts, oldest first (``<topic>.v1.avsc``, ``<topic>.v2.avsc``, ...)."""
    source: Path

    @property
    def kafka_topic(self) -> str:
        return self.spec.kafka_topic or f"{self.env}.{self.company}.{self.domain}.{self.name}"

    @property
    def prefix(self) -> TablePrefix:
        return TablePrefix(self.env, self.company, self.domain, self.name)

    @property
    def database(self) -> str:
        return self.spec.database or default_names(self.prefix)[0]

    @property
    def table(self) -> str:
        return self.spec.table or default_names(self.prefix)[1]

    @property
    def crawler_name(self) -> str:
        return self.spec.crawler_name or crawler_name_for(self.database, self.table)

    @property
    def crawled(self) -> bool:
        """Whether the topic's table is a crawler's to make (a Hive table in crawler mode; an Iceberg table is made
        by the archiver, and a crawler over its location would make a second, wrong, table)."""
        return self.spec.table_inference == TableInference.CRAWLER and self.spec.table_format == TableFormat.HIVE

    def crawler(self, bucket: str) -> CrawlerSpec:
        """The topic's crawler (crawler-mode topics get one in every deployment)."""
        return CrawlerSpec(self.crawler_name, self.database, s3_uri(bucket, self.prefix.data_prefix()))

    @property
    def personal_fields(self) -> dict[str, PiiAction]:
        """Every personal field of any schema version with its action: the schemas' tags (a later version's
        tag wins), then the catalog's ``pii`` overrides."""
        return {path: action for path, (action, _) in self.personal_field_sources().items()}

    def personal_field_sources(self) -> dict[str, tuple[PiiAction, str]]:
        """Every personal field with its action and where that was declared (``schema v<n>`` or ``catalog``)."""
        found: dict[str, tuple[PiiAction, str]] = {}
        for version, text in enumerate(self.schemas, start=1):
            found |= {p: (a, f"schema v{version}") for p, a in schema_personal_fields(json.loads(text)).items()}
        return found | {path: (action, "catalog") for path, action in self.spec.pii.items()}

    @property
    def kafka_columns(self) -> dict[str, StoredAs]:
        """The columns of the Kafka key and headers the archive keeps (``_key``, ``_headers``), with how
        (``archive.key``, ``archive.headers``: clear or hmac)."""
        archive = self.spec.archive
        kept = {KAFKA_KEY_COLUMN: archive.key, HEADERS_COLUMN: archive.headers}
        return {column: how for column, how in kept.items() if how != StoredAs.DROP}

    @property
    def personal_columns(self) -> tuple[str, ...]:
        """The table's columns tagged ``pii`` (``kafkalake.lftags.personal_columns``): its personal fields',
        each subject field's and the stored Kafka key's and headers' (clear or hashed: a key names a subject, a
        header can). A Debezium table's columns are the row's (``after.email`` and ``before.email`` are ``email``);
        an upsert table's key as text (``UPSERT_KEY_COLUMN``) is personal where its key is."""
        fields, subjects = self.personal_fields, self.spec.subject_fields
        if self.spec.envelope == Envelope.DEBEZIUM:
            fields = {row: action for path, action in fields.items() if (row := _row_path(path))}
            subjects = tuple(row for path in subjects if (row := _row_path(path)))
        columns = personal_columns(fields, (*subjects, *self.kafka_columns))
        if self.spec.mode != TableMode.UPSERT:
            return columns
        key = {f.lower() for f in self.spec.key_fields} or {KAFKA_KEY_COLUMN}
        return tuple(sorted({*columns, UPSERT_KEY_COLUMN})) if key & set(columns) else columns

    @property
    def quarantine(self) -> QuarantineMode:
        """The catalog's choice, else restricted for a topic with a personal column (a personal field, a subject
        field, the stored Kafka key or headers: the raw bytes hold the key too), plain for the others."""
        if self.spec.quarantine is not None:
            return self.spec.quarantine
        return QuarantineMode.RESTRICTED if self.personal_columns else QuarantineMode.PLAIN

    def quarantine_prefix(self) -> str:
        """Where the topic's quarantine objects are (``kafkalake.layout``)."""
        return self.prefix.quarantine_prefix(restricted=self.quarantine == QuarantineMode.RESTRICTED)

    def quarantine_prefixes(self) -> tuple[str, ...]:
        """Every prefix that may hold the topic's quarantine objects: its own, and the restricted one, where the
        records of schema versions the catalog lacks are held whatever the topic's mode (``kafkalake.undeclared``)."""
        return tuple(dict.fromkeys((self.quarantine_prefix(), self.prefix.quarantine_prefix(restricted=True))))

    @property
    def keeps_tombstones(self) -> bool:
        """Whether the archiver writes its tombstones as delete-log rows (``tombstones: keep``), which an upsert
        table's commit reads as deletes of their keys (``mode: upsert``)."""
        return self.spec.tombstones == "keep" or self.spec.mode == TableMode.UPSERT

    @property
    def erasable(self) -> bool:
        """Whether erasure requests reach this table: by key, by subject fields, or both."""
        return self.spec.erasure == "by_key" or bool(self.spec.subject_fields)

    @property
    def needs_key(self) -> bool:
        """Whether archiving the topic takes the environment's pseudonym key: it hashes a personal field, its Kafka
        key or headers, or its tombstones are erasure requests (their Kafka keys are stored hashed)."""
        hashes_kafka = StoredAs.HMAC in self.kafka_columns.values()
        return needs_key(self.personal_fields) or hashes_kafka or self.spec.erasure == "by_key"

    def declares(self, schema_text: str) -> bool:
        """Whether one of the topic's ``.avsc`` files holds this schema (equal as JSON: whitespace and key order
        aside)."""
        schema = json.loads(schema_text)
        return any(json.loads(text) == schema for text in self.schemas)

    def field_paths(self) -> set[str]:
        """The path of every field, array's elements and map's values in any schema version
        (``kafkalake.personal.SchemaPath``)."""
        return {p.path for text in self.schemas for p in schema_paths(json.loads(text))}

    def derived(self) -> dict[str, Any]:
        """The full derived configuration, as ``catalog show`` prints it."""
        return {
            "topic": self.name,
            "company": self.company,
            "domain": self.domain,
            "env": self.env,
            "kafka_topic": self.kafka_topic,
            "s3_prefix": self.prefix.data_prefix(),
            "quarantine_prefix": self.quarantine_prefix(),
            "glue_database": self.database,
            "glue_table": self.table,
            "crawler_name": self.crawler_name,
            "schema_versions": len(self.schemas),
            "source": str(self.source),
            **self.spec.model_dump(mode="json", exclude={"kafka_topic", "database", "table", "crawler_name"}),
            "quarantine": self.quarantine.value,
            "personal_fields": {path: action.value for path, action in sorted(self.personal_fields.items())},
        }


@dataclass(frozen=True)
class TopicCatalogProblem:
    file: str
    field: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.message} (fix: {self.fix})"


class TopicCatalogInvalid(Exception):
    def __init__(self, problems: list[TopicCatalogProblem]) -> None:
        self.problems = problems
        super().__init__(f"{len(problems)} catalog problem(s):\n" + "\n".join(f"  - {p}" for p in problems))


@dataclass(frozen=True)
class TopicCatalog:
    root: Path
    topics: tuple[Topic, ...]

    def for_env(self, env: str) -> list[Topic]:
        return [t for t in self.topics if t.env == env]

    def environments(self) -> list[str]:
        return sorted({t.env for t in self.topics})

    def get(self, name: str, env: str | None = None) -> Topic:
        """Find a topic by short name, Kafka topic name or ``database.table``."""
        found = [
            t
            for t in self.topics
            if (env is None or t.env == env) and name in (t.name, t.kafka_topic, f"{t.database}.{t.table}")
        ]
        if not found:
            raise KeyError(f"no topic {name!r}{f' in env {env!r}' if env else ''} in catalog {self.root}")
        if len(found) > 1:
            envs = ", ".join(sorted(t.env for t in found))
            raise KeyError(f"topic {name!r} exists in several environments ({envs}); pass --env")
        return found[0]

    def by_table(self, database: str, table: str) -> Topic | None:
        return next((t for t in self.topics if t.database == database and t.table == table), None)


def load_topic_catalog(root: Path) -> TopicCatalog:
    """Load and validate a catalog; raise ``TopicCatalogInvalid`` listing every problem found."""
    problems: list[TopicCatalogProblem] = []
    if not root.is_dir():
        raise TopicCatalogInvalid(
            [TopicCatalogProblem(str(root), "-", "catalog folder does not exist", "pass --catalog DIR")]
        )
    defaults = _load_defaults(root, problems)
    topics = [
        topic
        for path in sorted(root.rglob("*.yaml"))
        if path.name != DEFAULTS_FILE
        for topic in [_load_topic(root, path, defaults, problems)]
        if topic is not None
    ]
    _check_unique(topics, problems)
    if problems:
        raise TopicCatalogInvalid(problems)
    return TopicCatalog(root, tuple(topics))


def _load_defaults(root: Path, problems: list[TopicCatalogProblem]) -> dict[str, Any]:
    path = root / DEFAULTS_FILE
    if not path.exists():
        return {}
    return _read_yaml(path, problems) or {}


def _read_yaml(path: Path, problems: list[TopicCatalogProblem]) -> dict[str, Any] | None:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        problems.append(TopicCatalogProblem(str(path), "-", f"not valid YAML ({exc})", "fix the YAML syntax"))
        return None
    if not isinstance(data, dict):
        problems.append(TopicCatalogProblem(str(path), "-", "top level is not a mapping", "write key: value pairs"))
        return None
    return data


HIVE_ONLY_KEYS = ("table_inference", "crawler_name")
"""Keys of a Hive table only: an Iceberg topic does not inherit them from the defaults (its own file may not set
them, ``TopicSpec``)."""


def _merged(defaults: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    """A topic's own keys over the defaults; an Iceberg topic leaves the defaults' Hive-only keys out."""
    merged = {**defaults, **data}
    if merged.get("table_format") == "iceberg":
        merged = {k: v for k, v in merged.items() if k not in HIVE_ONLY_KEYS or k in data}
    return merged


def _load_topic(root: Path, path: Path, defaults: dict[str, Any], problems: list[TopicCatalogProblem]) -> Topic | None:
    parts = path.relative_to(root).parts
    if len(parts) != 4:
        problems.append(
            TopicCatalogProblem(
                str(path),
                "path",
                "topic files live exactly four levels deep",
                "move it to catalog/<company>/<domain>/<environment>/<topic>.yaml",
            )
        )
        return None
    company, domain, env, file_name = parts
    name = file_name.removesuffix(".yaml")
    bad_segments = False
    for field_name, value in (("company", company), ("domain", domain), ("environment", env), ("topic", name)):
        if not re.fullmatch(NAME_PATTERN, value):
            problems.append(
                TopicCatalogProblem(
                    str(path),
                    field_name,
                    f"{value!r} is not a valid name",
                    f"rename it to {_suggest(value)!r} (lower case letters, digits, '-', '_')",
                )
            )
            bad_segments = True
    data = _read_yaml(path, problems)
    if data is None or bad_segments:
        return None
    try:
        spec = TopicSpec.model_validate(_merged(defaults, data))
    except ValidationError as exc:
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"]) or "-"
            problems.append(TopicCatalogProblem(str(path), loc, err["msg"], _key_fix(err)))
        _load_schemas(path, name, problems)  # the file's schema problems too, not only its first kind
        return None
    schemas = _load_schemas(path, name, problems)
    topic = Topic(name, company, domain, env, spec, schemas, path)
    if not schemas:
        problems.append(
            TopicCatalogProblem(
                str(path),
                "schemas",
                "no Avro schema beside the topic file",
                f"add {name}.v1.avsc next to {path.name} (JSON topics declare their structure as Avro too)",
            )
        )
    _check_personal_fields(topic, problems)
    _check_erasure(topic, problems)
    _check_time_fields(topic, problems)
    _check_state_keys(topic, problems)
    _check_glue_names(topic, problems)
    return topic


def _check_glue_names(topic: Topic, problems: list[TopicCatalogProblem]) -> None:
    for field_name, value in (("database", topic.database), ("table", topic.table)):
        if not ATHENA_NAME.match(value):
            problems.append(
                TopicCatalogProblem(
                    str(topic.source),
                    field_name,
                    f"{value!r} is not legal in Athena",
                    "use lower case letters, digits and underscores, starting with a letter",
                )
            )


def _check_personal_fields(topic: Topic, problems: list[TopicCatalogProblem]) -> None:
    """A ``pii`` path must name a field of some schema version; a schema's own ``pii`` tag must name an action."""
    try:
        known = topic.field_paths()
        for text in topic.schemas:
            schema_personal_fields(json.loads(text))
    except ValueError as exc:
        actions = ", ".join(PiiAction)
        message = f"a field's pii tag is not an action ({exc})"
        problems.append(TopicCatalogProblem(str(topic.source), "schemas", message, f"use {actions}"))
        return
    if topic.spec.quarantine == QuarantineMode.PLAIN and topic.personal_columns:
        problems.append(
            TopicCatalogProblem(
                str(topic.source),
                "quarantine",
                "the topic has personal columns (personal fields, subject fields or the stored Kafka key or headers: "
                f"{', '.join(topic.personal_columns)}), so its raw records must not land in the plain quarantine",
                f"use quarantine: {QuarantineMode.RESTRICTED} or {QuarantineMode.OFFSETS_ONLY}, or leave it out",
            )
        )
    for path in sorted(set(topic.spec.pii) - known):
        message, fix = "no schema version has this field", PATHS
        if setting := KAFKA_SETTINGS.get(path):
            message = f"{not_a_value_field(path)}: pii names value fields"
            fix = f"declare how the archive keeps the {setting} instead: archive: {{{setting}: hmac}}"
            fix += " (drop leaves it out)"
        problems.append(TopicCatalogProblem(str(topic.source), f"pii.{path}", message, fix))
    _check_actions(topic, problems)


PATHS = (
    "use the path of a field in one of the topic's .avsc files: dotted names, [] after an array for its elements, "
    "{} after a map for its values (customer.email, contacts[].email, tags[], attributes{}.phone)"
)
"""The fix of an unknown path: the syntax of every path the catalog takes."""
DEBEZIUM_IMAGES = ("after.", "before.")
"""A Debezium change's images of the row: the table's columns are their fields."""
OP_COLUMN = "_op"
"""A Debezium row's operation (``c``, ``u``, ``r``)."""
SOURCE_COLUMNS = {"ts_ms": "_source_ts_ms", "lsn": "_source_lsn"}
"""The Debezium ``source`` fields kept as columns (when the connector's source has them): the source's position."""


def debezium_columns(schema: dict[str, Any]) -> list[str]:
    """The table columns of a Debezium Envelope schema's changes: the row's fields (``before``'s record, which
    ``after`` names), ``OP_COLUMN``, and the ``SOURCE_COLUMNS`` its ``source`` has."""
    fields = {f["name"]: f["type"] for f in schema.get("fields", [])}
    images = [t for t in (*_branches(fields.get("before")), *_branches(fields.get("after"))) if isinstance(t, dict)]
    row = [f["name"] for f in images[0]["fields"]] if images else []
    source = [f["name"] for t in _branches(fields.get("source")) if isinstance(t, dict) for f in t.get("fields", [])]
    return [*row, OP_COLUMN, *(column for name, column in SOURCE_COLUMNS.items() if name in source)]


def _branches(avro_type: Any) -> list[Any]:
    return avro_type if isinstance(avro_type, list) else [avro_type]


def _row_path(path: str) -> str | None:
    """A Debezium value path's path in the table's row (``after.email`` → ``email``); None outside the images."""
    return next((path.removeprefix(image) for image in DEBEZIUM_IMAGES if path.startswith(image)), None)


KAFKA_SETTINGS = {KAFKA_KEY_COLUMN: "key", HEADERS_COLUMN: "headers"}
"""The Kafka key's and headers' columns, and the archive setting that says how each is kept: ``pii`` and
``subject_fields`` name value fields, never these."""


def not_a_value_field(column: str) -> str:
    return f"{column} holds the record's Kafka {KAFKA_SETTINGS[column]}, not a field of its value"


def _check_actions(topic: Topic, problems: list[TopicCatalogProblem]) -> None:
    """Every personal field's action must fit its kind in every schema version that has it
    (``kafkalake.personal.action_refusal``); each refused path is reported once, for its first such version."""
    sources = topic.personal_field_sources()
    refused: set[str] = set()
    for version, text in enumerate(topic.schemas, start=1):
        for place in schema_paths(json.loads(text)):
            if place.path not in sources or place.path in refused:
                continue
            action, source = sources[place.path]
            refusal = action_refusal(place.path, action, place.kind)
            if refusal is not None:
                refused.add(place.path)
                where = f"pii.{place.path}" if source == "catalog" else f"schemas (v{version}: {place.path})"
                problems.append(TopicCatalogProblem(str(topic.source), where, refusal[0], refusal[1]))


def _key_fix(error: Any) -> str:
    """The fix of a topic file's refused key: for an unknown key, the nearest one the catalog takes at its place."""
    default = "see the catalog keys in docs/catalog.md"
    if error["type"] != "extra_forbidden":
        return default
    *parents, key = (str(p) for p in error["loc"])
    model: Any = TopicSpec
    for parent in parents:
        annotation = model.model_fields[parent].annotation if parent in model.model_fields else None
        model = annotation if isinstance(annotation, type) and hasattr(annotation, "model_fields") else None
        if model is None:
            return default
    near = difflib.get_close_matches(key, list(model.model_fields), n=1, cutoff=0.6)
    return f"did you mean `{near[0]}`? ({default})" if near else default


def _check_time_fields(topic: Topic, problems: list[TopicCatalogProblem]) -> None:
    """A business-time candidate no schema version has would never be found: every record would fall back to its
    Kafka time without a word."""
    known = topic.field_paths() if topic.schemas else set()
    for index, candidate in enumerate(topic.spec.time_fields):
        if topic.schemas and candidate.path not in known:
            problems.append(
                TopicCatalogProblem(
                    str(topic.source),
                    f"time_fields.{index}.path",
                    f"no schema version has the field {candidate.path}, so every record would take its Kafka time",
                    "use a dotted path of a field in one of the topic's .avsc files, or remove the candidate",
                )
            )


def _check_state_keys(topic: Topic, problems: list[TopicCatalogProblem]) -> None:
    """An upsert table's key fields and version field are fields of its row (``after``'s with ``envelope:
    debezium``), and a Debezium topic's schema is a change event: otherwise no change could be placed."""
    spec = topic.spec
    if spec.mode != TableMode.UPSERT or not topic.schemas:
        return
    known = topic.field_paths()
    debezium = spec.envelope == Envelope.DEBEZIUM
    missing = sorted({"before", "after", "op"} - known) if debezium else []
    if missing:
        problems.append(
            TopicCatalogProblem(
                str(topic.source),
                "envelope",
                f"envelope: debezium reads Debezium change events, and no schema version has {', '.join(missing)}",
                "check the topic's .avsc files (a Debezium Envelope: before, after, source, op), or set envelope: none",
            )
        )
        return
    row = "after." if debezium else ""
    named = [("key_fields", f) for f in spec.key_fields]
    named += [("version_field", spec.version_field)] if spec.version_field else []
    for where, name in named:
        if f"{row}{name}" not in known:
            problems.append(
                TopicCatalogProblem(
                    str(topic.source),
                    f"{where}.{name}",
                    f"no schema version's row has the field {name}"
                    + (" (a Debezium row is the event's after)" if debezium else ""),
                    "name a top-level field of the row in one of the topic's .avsc files",
                )
            )


def _check_erasure(topic: Topic, problems: list[TopicCatalogProblem]) -> None:
    """A declaration that could never erase anything: ``by_key`` without the key stored, an unknown subject field."""
    source = str(topic.source)
    if topic.spec.erasure == "by_key" and KAFKA_KEY_COLUMN not in topic.kafka_columns:
        problems.append(
            TopicCatalogProblem(
                source,
                "erasure",
                "by_key erasure matches rows by their Kafka key, but the table does not store it (archive.key: drop)",
                "set archive.key: hmac (its keyed hash) or clear (or declare subject_fields instead)",
            )
        )
    known = topic.field_paths() if topic.schemas else set()
    for path in sorted(p for p in topic.spec.subject_fields if within_collection(p)):
        problems.append(
            TopicCatalogProblem(
                source,
                f"subject_fields.{path}",
                "a subject field holds one identifier per row; this one lies inside an array or a map",
                "name a field outside arrays and maps (or declare erasure: by_key)",
            )
        )
    unknown = ("no schema version has this field", "use a dotted path of a field in one of the topic's .avsc files")
    kafka_key = (not_a_value_field(KAFKA_KEY_COLUMN), "declare erasure: by_key instead")
    for path in sorted(set(topic.spec.subject_fields) - known):
        message, fix = kafka_key if path == KAFKA_KEY_COLUMN else unknown
        problems.append(TopicCatalogProblem(source, f"subject_fields.{path}", message, fix))


def _load_schemas(path: Path, name: str, problems: list[TopicCatalogProblem]) -> tuple[str, ...]:
    found: dict[int, Path] = {}
    for schema_path in path.parent.glob(f"{name}.v*.avsc"):
        number = schema_path.name.removeprefix(f"{name}.v").removesuffix(".avsc")
        if not number.isdigit():
            problems.append(
                TopicCatalogProblem(
                    str(schema_path), "schema", "schema file name has no version number", f"name it {name}.v<N>.avsc"
                )
            )
            continue
        found[int(number)] = schema_path
    texts = []
    for _, schema_path in sorted(found.items()):
        try:
            fastavro.parse_schema(json.loads(schema_path.read_text()))
        except (ValueError, fastavro.schema.SchemaParseException) as exc:
            problems.append(
                TopicCatalogProblem(
                    str(schema_path),
                    "schema",
                    f"not a valid Avro schema ({exc})",
                    "fix the schema; `python -m fastavro` style validation must pass",
                )
            )
            continue
        texts.append(schema_path.read_text())
    if found and sorted(found) != list(range(1, len(found) + 1)):
        problems.append(
            TopicCatalogProblem(
                str(path),
                "schemas",
                f"schema versions {sorted(found)} have gaps",
                "number schema files v1, v2, ... without gaps",
            )
        )
    return tuple(texts)


def _check_unique(topics: list[Topic], problems: list[TopicCatalogProblem]) -> None:
    seen: dict[tuple[str, ...], Topic] = {}
    for topic in topics:
        for what, key in (
            ("table", ("table", topic.env, topic.database, topic.table)),
            ("kafka_topic", ("kafka_topic", topic.env, topic.kafka_topic)),
        ):
            other = seen.setdefault(key, topic)
            if other is not topic:
                problems.append(
                    TopicCatalogProblem(
                        str(topic.source),
                        what,
                        f"maps to the same {what} {key[-1]!r} in {topic.env!r} as {other.source}",
                        f"set '{what}:' to a distinct name in one of the two files",
                    )
                )


def _suggest(value: str) -> str:
    try:
        return to_segment(value)
    except LayoutError:
        return "topic-name"


def tables_document(topics: Iterable[Topic]) -> list[dict[str, Any]]:
    """The catalog as the maintainer Lambda needs it (bundled as ``tables.json``): prefix, Glue names, and the
    LF-tags of the tables it creates (``kafkalake.lftags``)."""
    return [
        {
            "env": t.env,
            "company": t.company,
            "domain": t.domain,
            "topic": t.name,
            "database": t.database,
            "table": t.table,
            "inference": t.spec.table_inference.value,
            "table_format": t.spec.table_format.value,
            "crawler_name": t.crawler_name,
            "sensitivity": t.spec.sensitivity.value,
            "personal_columns": list(t.personal_columns),
        }
        for t in topics
    ]
