"""Recording an explicit erasure request, as ``kafkalake erase --subject`` and the demo do: the subject hashed with
the environment's pseudonym key (and with the earlier key the secret keeps after a rotation), the request stored
before any work, nothing of the identifier in clear."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.erasure import ErasureRequest, RequestStore, Source, new_request, receipt_token
from kafkalake.layout import erasure_request_key
from kafkalake.personal import load_keys
from kafkalake.topic_catalog import Topic


@dataclass(frozen=True)
class Recorded:
    request: ErasureRequest
    key: str
    """Where it is stored, in the environment's bucket."""
    new: bool
    """False when an explicit request for the same subject and tables was already stored (and is returned)."""


def record_request(
    endpoints: Endpoints, env: str, topics: Sequence[Topic], subject: str, *, named: bool, once: bool = False
) -> Recorded:
    """Store a request to erase ``subject`` from ``topics`` (every erasable table of ``env`` unless ``named``);
    with ``once``, an explicit request already stored for the same hashed subject and tables is kept instead."""
    keys = load_keys(make_client(endpoints, "secretsmanager"), endpoints.pseudonym_secret_arn)
    names = tuple(f"{t.database}.{t.table}" for t in topics) if named else ()
    within = min(t.spec.erasure_within_days for t in topics)
    store = RequestStore(make_client(endpoints, "s3"), endpoints.bucket, env)
    digest = keys.current.digest(subject)
    if once:
        requests, _ = store.requests()
        for earlier in requests:
            same = earlier.tokens() == [receipt_token(digest)] and earlier.tables == names
            if same and earlier.source == Source.REQUEST:
                return Recorded(earlier, erasure_request_key(env, earlier.request_id), new=False)
    digests = {key.key_id: key.digest(subject) for key in keys.keys}
    request = new_request([digests], names, within, keys.current.key_id, datetime.now(UTC))
    return Recorded(request, store.put(request), new=True)
