"""Vote ingest: what POST /v1/votes accepts, judged by the pipeline's own parser, and how it is
published to the votes topic.

Votes are validated with the pipeline's own parser (schemas.contract.parse_vote): what it accepts
here, the pipeline counts. They are published encoded by the contract (schemas.contract.
events_message) exactly as `upvotes publish` encodes them: one accepted event as a v1 message
(attributes `event_id`, its own or a new `message-<uuid4>`, and `event_time`), several as ONE
contract v2 batch (attribute format=ndjson, a new `batch-<uuid4>` event_id, one v1 event per line,
at most MAX_EVENTS events and MAX_BODY_BYTES bytes). A body must arrive within the service's body
timeout. A token may send both kinds of event, a |delta| beyond its cap (--max-delta) rejecting
that event; a live-page session is one voter and sends only vote-state events of its own user.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

import orjson
from fastapi import Request
from starlette.exceptions import HTTPException

from schemas.contract import (
    FORMAT_ATTRIBUTE,
    MAX_ABS_DELTA,
    MAX_BATCH_BYTES,
    MAX_BATCH_EVENTS,
    NDJSON,
    parse_message,
    parse_vote,
)
from schemas.records import Rejected, VoteEvent, VoteState

# A request carries at most what one contract v2 batch may: it is published as one message.
MAX_BODY_BYTES = MAX_BATCH_BYTES
MAX_EVENTS = MAX_BATCH_EVENTS
PUBLISH_TIMEOUT_S = 30.0


class VotePublisher(Protocol):
    def publish(self, data: bytes, attributes: dict[str, str]) -> None:
        """Publishes one message and returns once Pub/Sub has accepted it."""


class PubSubVotePublisher:
    """Publishes to one topic with the Pub/Sub client, waiting for each publish."""

    def __init__(self, topic_path: str) -> None:
        from google.cloud import pubsub_v1

        self._client = pubsub_v1.PublisherClient()
        self._topic_path = topic_path

    def publish(self, data: bytes, attributes: dict[str, str]) -> None:
        # **attributes are publish's **attrs, not its retry or timeout, which mypy maps them onto too.
        future = self._client.publish(self._topic_path, data, **attributes)  # type: ignore[arg-type]
        future.result(timeout=PUBLISH_TIMEOUT_S)


@dataclass(frozen=True)
class ValidatedVotes:
    events: list[bytes]  # accepted events, each one line of compact JSON
    rejected: list[dict]  # {"line": n (from 1), "error": reason}
    whole: Rejected | None = None  # the body as a whole broke a batch rule (too many events, not UTF-8)


def _over_cap(event: VoteEvent | VoteState, max_delta: int) -> str | None:
    """Why a delta event is beyond the credential's cap; None within it. A vote-state event has
    no delta: it moves a post's counts by at most one, whoever sends it."""
    if isinstance(event, VoteState) or abs(event.delta) <= max_delta:
        return None
    return f"delta_over_limit: delta {event.delta} is beyond ±{max_delta}, this credential's limit"


def validate_votes(body: bytes, one_event: bool, now_s: float, max_delta: int = MAX_ABS_DELTA) -> ValidatedVotes:
    """The body as one v1 event (`one_event`) or as a contract v2 ndjson batch, judged by the
    pipeline's own parser (schemas.contract): what it accepts here, the pipeline counts. A
    delta event whose |delta| is above `max_delta` (the credential's cap) is rejected too."""
    if one_event:
        parsed = parse_vote(body, None, now_s)
        error = parsed.error if isinstance(parsed, Rejected) else _over_cap(parsed, max_delta)
        if error is not None:
            return ValidatedVotes([], [{"line": 1, "error": error}])
        return ValidatedVotes([orjson.dumps(orjson.loads(body))], [])
    results = list(parse_message(body, {FORMAT_ATTRIBUTE: NDJSON}, now_s))
    # (line number from 1, line): the parser's own line rule
    lines = [(number, line) for number, line in enumerate(body.split(b"\n"), 1) if line.strip()]
    if len(results) != len(lines):  # one Rejected for the whole batch
        whole = results[0]
        assert isinstance(whole, Rejected)
        return ValidatedVotes([], [], whole)
    events, rejected = [], []
    for (number, line), result in zip(lines, results):
        if isinstance(result, Rejected):
            rejected.append({"line": number, "error": result.error})
        elif (error := _over_cap(result, max_delta)) is not None:
            rejected.append({"line": number, "error": error})
        else:
            events.append(line.strip())
    return ValidatedVotes(events, rejected)


def outside_session_scope(body: bytes, user_id: str, now_s: float) -> str | None:
    """Why a live-page session voting as `user_id` may not send this one event, or None. A
    session is one voter: it sends vote-state events of its own user, so it counts once per
    post however often it clicks. An invalid event is None here: validate_votes rejects it
    with the parser's reason."""
    event = parse_vote(body, None, now_s)
    if isinstance(event, VoteEvent):
        return (
            'a live-page session sends vote-state events ({"post_id", "user_id", "vote": "up"|"none"|"down", '
            '"event_time"}), one vote per post; delta events need a bearer token'
        )
    if isinstance(event, VoteState) and event.user_id != user_id:
        return f"a live-page session votes only as its own user {user_id!r}, not as {event.user_id!r}"
    return None


async def read_body(request: Request, timeout_s: float) -> bytes:
    """The request's body: 413 past MAX_BODY_BYTES (declared or sent), 408 when it has not
    arrived within `timeout_s` (a client sending a byte a second holds nothing for long)."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
        raise HTTPException(413, f"the body is larger than {MAX_BODY_BYTES} bytes")
    chunks: list[bytes] = []
    size = 0

    async def collect() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise HTTPException(413, f"the body is larger than {MAX_BODY_BYTES} bytes")
            chunks.append(chunk)

    try:
        await asyncio.wait_for(collect(), timeout_s)
    except asyncio.TimeoutError:
        raise HTTPException(408, f"the body did not arrive within {timeout_s:g} s") from None
    return b"".join(chunks)
