"""Schema versions the registry holds and the catalog lacks: what the archiver protects in their records, and when
it holds them back instead (docs/personal-data.md, "Versions the catalog lacks").

A producer may register a version before anyone adds its ``.avsc`` to the catalog; the archiver decodes every
version the registry holds, so without this rule a newly tagged field of such a version would land in clear. The
rule, decided per version from its schema and the catalog (pure: a redo of a plan decides the same unless the catalog
changed in between, as for any change to a topic's personal fields):
- its own tags (``kafkalake.personal.tagged_action``, at any depth) are honoured as a declared version's are, the
  catalog's overrides still winning by path;
- a leaf that is neither personal nor in a version the catalog declares is unvetted: the version's records are
  held (quarantined with their raw bytes under the restricted prefix, reason ``UNDECLARED_VERSION``) until the
  catalog declares it;
- so is a version whose tags ask for the keyed hash when the run has no pseudonym key (the key is read only for
  topics whose catalog hashes a field).
A version that only removes fields or changes defaults has no unvetted leaf: it is archived with the catalog's
personal fields protected.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kafkalake.personal import PiiAction, needs_key, schema_personal_fields, unvetted_paths
from kafkalake.topic_catalog import Topic

UNDECLARED_VERSION = "undeclared_schema_version"
"""The quarantine reason of a held record (``VersionProtection.held``)."""


@dataclass(frozen=True)
class VersionProtection:
    """How one registered schema version's records are protected."""

    declared: bool
    """One of the topic's ``.avsc`` files holds the version."""
    personal: dict[str, PiiAction]
    """The personal fields protected in its records: the catalog's, and for an undeclared version its own tags."""
    unvetted: tuple[str, ...]
    """Leaf paths of an undeclared version that are neither personal nor in a declared version."""

    def held(self, key_at_hand: bool) -> str | None:
        """Why the version's records are held rather than archived (field paths only, never a value); None when
        they are archived. ``key_at_hand``: the run has the pseudonym key."""
        if self.declared:
            return None
        if self.unvetted:
            unvetted = ", ".join(self.unvetted)
            return f"fields {unvetted} are neither tagged personal nor in a version the catalog declares"
        if needs_key(self.personal) and not key_at_hand:
            return "its tags ask for the keyed hash and the run read no pseudonym key (no catalogued field is hashed)"
        return None


def protection(topic: Topic, schema_text: str) -> VersionProtection:
    """The rule above for the version ``schema_text`` of ``topic``'s value subject."""
    if topic.declares(schema_text):
        return VersionProtection(True, topic.personal_fields, ())
    schema = json.loads(schema_text)
    own = {path: action for path, action in schema_personal_fields(schema).items() if path not in topic.spec.pii}
    personal = topic.personal_fields | own
    return VersionProtection(False, personal, unvetted_paths(schema, topic.field_paths(), personal))
