"""moto's S3 notifications, completed to what S3 sends.

moto's server leaves out of each record four fields every S3 event notification carries (``userIdentity``,
``requestParameters``, ``responseElements`` and the bucket's ``ownerIdentity``; see "Event message structure" in
the S3 user guide). The maintainer validates notifications with Powertools' strict models, so whatever receives
the local queue's messages for it completes them first: a botocore hook on the SQS client, which leaves every
other call, and every body that is not such a record, as it is.
"""

from __future__ import annotations

import json
from typing import Any, Final

LOCAL_PRINCIPAL: Final = "AWS:LOCAL-STACK"
FILLED: Final[dict[str, Any]] = {
    "userIdentity": {"principalId": LOCAL_PRINCIPAL},
    "requestParameters": {"sourceIPAddress": "127.0.0.1"},
    "responseElements": {"x-amz-request-id": "LOCAL", "x-amz-id-2": "LOCAL"},
}
"""The record fields moto leaves out, as S3 fills them (the bucket's ``ownerIdentity`` aside)."""


def complete_body(body: str) -> str:
    """``body`` with its S3 records completed; a body without a list of records is returned as it is."""
    try:
        document = json.loads(body)
    except json.JSONDecodeError:
        return body
    records = document.get("Records") if isinstance(document, dict) else None
    if not isinstance(records, list):
        return body
    for record in records:
        if not isinstance(record, dict) or record.get("eventSource") != "aws:s3":
            continue
        for name, value in FILLED.items():
            record.setdefault(name, dict(value))
        s3 = record.get("s3")
        if isinstance(s3, dict) and isinstance(s3.get("bucket"), dict):
            s3["bucket"].setdefault("ownerIdentity", {"principalId": LOCAL_PRINCIPAL})
    return json.dumps(document)


def _complete_received(parsed: dict[str, Any], **_: Any) -> None:
    for message in parsed.get("Messages", []):
        message["Body"] = complete_body(message["Body"])


def as_s3_sends(sqs: Any) -> Any:
    """``sqs``, the S3 notifications it receives completed (``complete_body``)."""
    sqs.meta.events.register("after-call.sqs.ReceiveMessage", _complete_received)
    return sqs
