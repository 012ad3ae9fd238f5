"""What arrives in the notification queue, as Powertools parser models.

A message body is one of: an S3 event notification, the same wrapped in an SNS notification, the
``s3:TestEvent`` S3 sends when notifications are configured, or an S3 "Object Created" event delivered through
EventBridge (whose keys are not URL-encoded). Anything else is malformed.

Notifications are validated with Powertools' own models, as strict as S3's documented structure: a record
lacking a field S3 always sends is malformed. Local endpoints that leave such fields out are completed by the dev
tooling before their messages reach the handler (``kafkalake_dev.local.s3_events``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from aws_lambda_powertools.utilities.parser import ValidationError, parse
from aws_lambda_powertools.utilities.parser.exceptions import InvalidEnvelopeError, InvalidModelTypeError
from aws_lambda_powertools.utilities.parser.models import (
    S3EventNotificationEventBridgeModel,
    S3Model,
    S3RecordModel,
    SnsNotificationModel,
)
from pydantic import BaseModel

from kafkalake.s3_location import decode_event_key


class S3TestEventModel(BaseModel):
    Service: str
    Event: Literal["s3:TestEvent"]
    Bucket: str


@dataclass(frozen=True)
class ObjectEvent:
    """One S3 event, whichever way it was delivered: its name and the object's key, decoded."""

    name: str
    """``ObjectCreated:Put``, ``ObjectRemoved:Delete``, ... (EventBridge's ``Object Created`` is ``ObjectCreated:``)."""
    key: str | None


@dataclass(frozen=True)
class ParsedBody:
    events: tuple[ObjectEvent, ...] = ()
    test_event: bool = False


class MalformedBody(ValueError):
    """A body that is no S3 event at all; its message is left for redrive to the dead-letter queue."""


MAX_ECHO = 300
"""Characters of a bad body (or of a validation error, which quotes it) an error message repeats."""


def _echo(value: object) -> str:
    text = str(value)
    return text if len(text) <= MAX_ECHO else f"{text[:MAX_ECHO]}… [{len(text) - MAX_ECHO} more characters]"


EVENTBRIDGE_NAMES = {"Object Created": "ObjectCreated:", "Object Deleted": "ObjectRemoved:"}


def parse_body(body: str) -> ParsedBody:
    """Parse one SQS message body (plain, SNS-wrapped or from EventBridge); raise ``MalformedBody`` saying why not,
    echoing at most ``MAX_ECHO`` characters of it."""
    try:
        document = json.loads(body)
    except json.JSONDecodeError as exc:
        raise MalformedBody(f"body is not JSON ({exc.msg} at {exc.pos}): {_echo(body)}") from exc
    if isinstance(document, dict) and document.get("Type") == "Notification" and "Message" in document:
        try:
            notification = parse(event=document, model=SnsNotificationModel)
        except ValidationError as exc:
            raise MalformedBody(f"SNS notification does not validate: {_echo(exc.errors()[:2])}") from exc
        return parse_body(str(notification.Message))
    if isinstance(document, dict) and document.get("Event") == "s3:TestEvent":
        parse(event=document, model=S3TestEventModel)
        return ParsedBody(test_event=True)
    if isinstance(document, dict) and document.get("source") == "aws.s3" and "detail-type" in document:
        return _eventbridge(document)
    try:
        records = parse(event=document, model=S3Model).Records
    except ValidationError as exc:
        raise MalformedBody(f"not an S3 event notification: {_echo(exc.errors()[:2])}") from exc
    except (InvalidEnvelopeError, InvalidModelTypeError) as exc:  # Powertools' validators reject shapes this way
        raise MalformedBody(f"not an S3 event notification: {_echo(exc)}") from exc
    return ParsedBody(events=tuple(_from_record(r) for r in records))


def _from_record(record: S3RecordModel) -> ObjectEvent:
    """S3's own notifications URL-encode the key ('+' for a space)."""
    key = decode_event_key(record.s3.object.key) if record.s3.object is not None else None
    return ObjectEvent(record.eventName, key)


def _eventbridge(document: dict[str, object]) -> ParsedBody:
    """An S3 event delivered through EventBridge: the key is not URL-encoded."""
    try:
        event = parse(event=document, model=S3EventNotificationEventBridgeModel)
    except ValidationError as exc:
        raise MalformedBody(f"not an S3 event from EventBridge: {_echo(exc.errors()[:2])}") from exc
    name = EVENTBRIDGE_NAMES.get(event.detail_type, event.detail_type)
    return ParsedBody(events=(ObjectEvent(name, event.detail.object.key),))
