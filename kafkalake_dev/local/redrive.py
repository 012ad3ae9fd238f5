"""Move the notification dead-letter queue's messages back to the queue, so the next drain registers them.

SQS's own message-move task is used where the endpoint has it; otherwise (the local endpoint) the messages are
received, sent to the queue and deleted from the dead-letter queue, ten at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

MOVE_TASK = "message-move-task"
COPY = "receive-send-delete"


@dataclass(frozen=True)
class Redrive:
    method: str
    moved: int
    """Messages moved (for the message-move task: the dead-letter queue's depth when the task started)."""
    task_handle: str | None = None


def _attribute(sqs: Any, url: str, name: str) -> str:
    return str(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[name])["Attributes"][name])


def redrive(
    sqs: Any, dlq_url: str, queue_url: str, *, use_move_task: bool = True, say: Callable[[str], None] = print
) -> Redrive:
    """Start SQS's message-move task, or (where the endpoint has none) copy the messages over."""
    depth = int(_attribute(sqs, dlq_url, "ApproximateNumberOfMessages"))
    if use_move_task:
        try:
            task = sqs.start_message_move_task(
                SourceArn=_attribute(sqs, dlq_url, "QueueArn"), DestinationArn=_attribute(sqs, queue_url, "QueueArn")
            )
            return Redrive(MOVE_TASK, depth, task["TaskHandle"])
        except ClientError as exc:
            say(f"[redrive] no message-move task at this endpoint ({exc.response['Error'].get('Code')}); copying")
    moved = 0
    while True:
        messages = sqs.receive_message(QueueUrl=dlq_url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get("Messages", [])
        if not messages:
            return Redrive(COPY, moved)
        for message in messages:
            sqs.send_message(QueueUrl=queue_url, MessageBody=message["Body"])
            sqs.delete_message(QueueUrl=dlq_url, ReceiptHandle=message["ReceiptHandle"])
            moved += 1
        say(f"[redrive] moved {moved} of about {depth}")
