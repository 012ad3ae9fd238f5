"""What arrives in the notification queue, as Powertools parser models.

A message body is one of: an S3 event notification, the same wrapped in an SNS notification, or the
``s3:TestEvent`` S3 sends when notifications are configured. Anything else is malformed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from aws_lambda_powertools.utilities.parser import ValidationError, parse
from aws_lambda_powertools.utilities.parser.exceptions import InvalidEnvelopeError, InvalidModelTypeError
from aws_lambda_powertools.utilities.parser.models import S3RecordModel, SnsNotificationModel
from aws_lambda_powertools.utilities.parser.models.s3 import (
    S3Bucket,
    S3Identity,
    S3Message,
    S3OwnerIdentify,
    S3RequestParameters,
    S3ResponseElements,
)
from pydantic import BaseModel


class LenientS3Bucket(S3Bucket):
    ownerIdentity: S3OwnerIdentify | None = None  # type: ignore[assignment]


class LenientS3Message(S3Message):
    bucket: LenientS3Bucket


class S3Record(S3RecordModel):
    """Powertools' record, minus fields S3-compatible endpoints (moto among them) leave out."""

    userIdentity: S3Identity | None = None  # type: ignore[assignment]
    requestParameters: S3RequestParameters | None = None  # type: ignore[assignment]
    responseElements: S3ResponseElements | None = None  # type: ignore[assignment]
    s3: LenientS3Message


class S3Notification(BaseModel):
    Records: list[S3Record]


class S3TestEventModel(BaseModel):
    Service: str
    Event: Literal["s3:TestEvent"]
    Bucket: str


@dataclass(frozen=True)
class ParsedBody:
    records: tuple[S3Record, ...] = ()
    test_event: bool = False


class MalformedBody(ValueError):
    """A body that is no S3 event at all; its message is left for redrive to the dead-letter queue."""


def parse_body(body: str) -> ParsedBody:
    """Parse one SQS message body (plain or SNS-wrapped); raise ``MalformedBody`` saying why not."""
    try:
        document = json.loads(body)
    except json.JSONDecodeError as exc:
        raise MalformedBody(f"body is not JSON ({exc.msg} at {exc.pos})") from exc
    if isinstance(document, dict) and document.get("Type") == "Notification" and "Message" in document:
        try:
            notification = parse(event=document, model=SnsNotificationModel)
        except ValidationError as exc:
            raise MalformedBody(f"SNS notification does not validate: {exc.errors()[:2]}") from exc
        return parse_body(str(notification.Message))
    if isinstance(document, dict) and document.get("Event") == "s3:TestEvent":
        parse(event=document, model=S3TestEventModel)
        return ParsedBody(test_event=True)
    try:
        return ParsedBody(records=tuple(parse(event=document, model=S3Notification).Records))
    except ValidationError as exc:
        raise MalformedBody(f"not an S3 event notification: {exc.errors()[:2]}") from exc
    except (InvalidEnvelopeError, InvalidModelTypeError) as exc:  # Powertools' validators reject shapes this way
        raise MalformedBody(f"not an S3 event notification: {exc}") from exc
