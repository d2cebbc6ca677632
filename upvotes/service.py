"""The HTTP service app servers call (`upvotes serve`): exact counts, fresh top posts, and
validated vote publishing, on FastAPI + uvicorn.

    GET  /v1/posts/{post_id}        {"post_id", "upvotes", "shares", "as_of"}; unknown posts read as zeros
    GET  /v1/posts?id=a&id=b        {"posts": [...]}
         (either, with ?unique=true) each count also has "unique_voters"
    GET  /v1/top?n=10               {"posts": [{"post_id", "upvotes", "shares"}...], "as_of", "exact", "bound", "folded_through"}
    POST /v1/votes                  one JSON event (Content-Type application/json) or ndjson, one event a line:
                                    202 {"accepted": n, "rejected": [{"line", "error"}]}; 400 when nothing is valid
    GET  /healthz                   {"status": "ok", "spanner_reads": n}
    GET  /docs, /openapi.json       the OpenAPI description
    GET  /                          the live page (upvotes/live_page.py)

Reads go through one spanner_store.counts_reader.CountsReader per process, so a hot post
costs at most one Spanner read per refresh interval however many viewers ask.

Votes are validated with the pipeline's own parser (schemas.contract.parse_vote) and
published to the votes topic: one accepted event as a v1 message (its event_id, or a new
one, as the `event_id` attribute), several as ONE contract v2 batch (attribute
format=ndjson, a new event_id for the batch, one v1 event per line, at most MAX_EVENTS
events and MAX_BODY_BYTES bytes). The reply comes after Pub/Sub has accepted the message.

Security: `serve` binds to loopback unless a write token is configured (see
upvotes/commands/serve.py); with a token, POST /v1/votes needs `Authorization: Bearer
<token>`, compared in constant time. Bodies are limited to MAX_BODY_BYTES and MAX_EVENTS
and must arrive within `body_timeout_s`; a request head must arrive within
`head_timeout_s` (uvicorn alone resets its idle timer on every byte, so a client sending
one byte a second could hold a connection forever). Errors are JSON {"error": reason},
never a traceback. CORS is off unless origins are configured.
"""
from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Protocol

import orjson
import uvicorn
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse, JSONResponse, Response
from google.api_core import exceptions as google_exceptions
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from uvicorn.protocols.http.h11_impl import H11Protocol

from schemas.contract import (
    EVENT_ID_ATTRIBUTE, FORMAT_ATTRIBUTE, LINE_ATTRIBUTE, MAX_BATCH_BYTES, MAX_BATCH_EVENTS, MAX_POST_ID_CHARS, NDJSON,
    parse_message, parse_vote, reason_of,
)
from schemas.records import Rejected
from spanner_store.counts_reader import CountsReader, PostCount
from upvotes.live_page import PAGE_HTML

LOG = logging.getLogger(__name__)
# A request carries at most what one contract v2 batch may: it is published as one message.
MAX_BODY_BYTES = MAX_BATCH_BYTES
MAX_EVENTS = MAX_BATCH_EVENTS
MAX_IDS_PER_READ = 1_000
MAX_TOP_N = 1_000
PUBLISH_TIMEOUT_S = 30.0
DEFAULT_HEAD_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 10.0
STARTUP_TIMEOUT_S = 30.0


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
        self._client.publish(self._topic_path, data, **attributes).result(timeout=PUBLISH_TIMEOUT_S)


@dataclass(frozen=True)
class ServiceSettings:
    write_token: str | None = None  # None: POST /v1/votes is open (loopback only, see serve)
    cors_origins: tuple[str, ...] = ()
    head_timeout_s: float = DEFAULT_HEAD_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S


@dataclass(frozen=True)
class ValidatedVotes:
    events: list[bytes]  # accepted events, each one line of compact JSON
    rejected: list[dict]  # {"line": n (from 1), "error": reason}
    whole: Rejected | None = None  # the body as a whole broke a batch rule (too many events, not UTF-8)


def validate_votes(body: bytes, one_event: bool, now_s: float) -> ValidatedVotes:
    """The body as one v1 event (`one_event`) or as a contract v2 ndjson batch, judged by the
    pipeline's own parser (schemas.contract): what it accepts here, the pipeline counts."""
    if one_event:
        parsed = parse_vote(body, None, now_s)
        if isinstance(parsed, Rejected):
            return ValidatedVotes([], [{"line": 1, "error": parsed.error}])
        return ValidatedVotes([orjson.dumps(orjson.loads(body))], [])
    results = list(parse_message(body, {FORMAT_ATTRIBUTE: NDJSON}, now_s))
    lines = [line for line in body.split(b"\n") if line.strip()]  # the parser's own line rule
    if len(results) != len(lines):  # one Rejected for the whole batch
        return ValidatedVotes([], [], results[0])
    events, rejected = [], []
    for line, result in zip(lines, results):
        if isinstance(result, Rejected):
            rejected.append({"line": int(result.attributes[LINE_ATTRIBUTE]), "error": result.error})
        else:
            events.append(line.strip())
    return ValidatedVotes(events, rejected)


def message_for(events: list[bytes]) -> tuple[bytes, dict[str, str]]:
    """One Pub/Sub message for accepted events: a v1 message for one, an ndjson batch for more."""
    if len(events) == 1:
        event_id = orjson.loads(events[0]).get("event_id") or str(uuid.uuid4())
        return events[0], {EVENT_ID_ATTRIBUTE: event_id}
    return b"\n".join(events), {FORMAT_ATTRIBUTE: NDJSON, EVENT_ID_ATTRIBUTE: str(uuid.uuid4())}


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


UNIQUE_HELP = "add unique_voters: distinct user IDs that upvoted (a HyperLogLog estimate)"


def _count_json(count: PostCount) -> dict:
    record = {"post_id": count.post_id, "upvotes": count.upvotes, "shares": count.shares,
              "as_of": count.as_of.isoformat()}
    if count.unique_voters is not None:
        record["unique_voters"] = count.unique_voters
    return record


def _error(status: int, reason: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": reason}, status_code=status, headers=headers)


def _check_post_id(post_id: str) -> None:
    if not post_id:
        raise HTTPException(400, "post_id is empty")
    if len(post_id) > MAX_POST_ID_CHARS:
        raise HTTPException(400, f"post_id has {len(post_id)} characters, at most {MAX_POST_ID_CHARS}")


async def _read_body(request: Request, timeout_s: float) -> bytes:
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


def create_app(reader: CountsReader, publisher: VotePublisher | None, settings: ServiceSettings = ServiceSettings(),
               clock: Callable[[], float] = time.time) -> FastAPI:
    """The service's ASGI app. `publisher` None: POST /v1/votes answers 503 (no topic configured)."""
    app = FastAPI(title="upvotes", version="1", description="Exact upvote and share counts of viral posts.")
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins),
                           allow_methods=["GET", "POST"], allow_headers=["Authorization", "Content-Type"])

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, error: HTTPException) -> JSONResponse:
        return _error(error.status_code, str(error.detail), getattr(error, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, error: RequestValidationError) -> JSONResponse:
        first = error.errors()[0] if error.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()))
        return _error(400, f"invalid request: {where}: {first.get('msg', 'invalid')}")

    @app.exception_handler(google_exceptions.GoogleAPICallError)
    async def backend_error(_: Request, error: google_exceptions.GoogleAPICallError) -> JSONResponse:
        LOG.warning("backend error: %s", error)
        return _error(503, f"the database or Pub/Sub is unavailable ({type(error).__name__}); retry later")

    @app.exception_handler(Exception)
    async def internal_error(_: Request, error: Exception) -> JSONResponse:
        LOG.exception("internal error")  # the traceback goes to the server log, never to the client
        return _error(500, "internal error")

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> HTMLResponse:
        return HTMLResponse(PAGE_HTML)

    @app.get("/healthz")
    def healthz() -> dict:
        """Up, and how many Spanner snapshots this process's reader has opened (for load tests)."""
        return {"status": "ok", "spanner_reads": reader.spanner_reads}

    @app.get("/v1/posts/{post_id:path}", summary="One post's exact counts")
    def read_post(post_id: str, unique: bool = Query(False, description=UNIQUE_HELP)) -> dict:
        _check_post_id(post_id)
        return _count_json(reader.get(post_id, unique))

    @app.get("/v1/posts", summary="Several posts' exact counts, in the order asked")
    def read_posts(id: list[str] = Query(..., description="a post ID; repeat for more"),  # noqa: A002
                   unique: bool = Query(False, description=UNIQUE_HELP)) -> dict:
        if len(id) > MAX_IDS_PER_READ:
            raise HTTPException(400, f"{len(id)} ids, at most {MAX_IDS_PER_READ} per request")
        for post_id in id:
            _check_post_id(post_id)
        return {"posts": [_count_json(count) for count in reader.get_many(id, unique)]}

    @app.get("/v1/top", summary="Top posts by exact upvotes, fresh without a fold")
    def read_top(n: int = Query(10, ge=1, le=MAX_TOP_N)) -> dict:
        top = reader.top(n)
        return {
            "posts": [{"post_id": p.post_id, "upvotes": p.upvotes, "shares": p.shares} for p in top.posts],
            "as_of": top.as_of.isoformat(), "exact": top.exact, "bound": top.bound,
            "folded_through": None if top.folded_through is None else top.folded_through.isoformat(),
        }

    @app.post("/v1/votes", status_code=202, summary="Publish votes (one JSON event, or ndjson)")
    async def post_votes(request: Request) -> Response:
        if settings.write_token is not None:
            given = request.headers.get("authorization", "")
            scheme, _, token = given.partition(" ")
            if scheme.lower() != "bearer" or not token:
                return _error(401, "a bearer token is required", {"WWW-Authenticate": "Bearer"})
            if not hmac.compare_digest(token.strip().encode(), settings.write_token.encode()):
                return _error(401, "the bearer token is not valid", {"WWW-Authenticate": "Bearer"})
        if publisher is None:
            return _error(503, "this server publishes no votes: start it with --topic")
        body = await _read_body(request, settings.body_timeout_s)
        one_event = request.headers.get("content-type", "").split(";")[0].strip().lower() == "application/json"
        votes = validate_votes(body, one_event, clock())
        if votes.whole is not None:
            return _error(413 if reason_of(votes.whole) in ("too_many_events", "too_large") else 400, votes.whole.error)
        if not votes.events:
            return JSONResponse({"error": "no valid event", "accepted": 0, "rejected": votes.rejected}, status_code=400)
        data, attributes = message_for(votes.events)
        await run_in_threadpool(publisher.publish, data, attributes)
        return JSONResponse({"accepted": len(votes.events), "rejected": votes.rejected}, status_code=202)

    return app


# --- running it ---------------------------------------------------------------------------

def protocol_with_head_timeout(head_timeout_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol, closing a connection whose next request head has not arrived
    `head_timeout_s` after the connection opened or the previous response ended (slow loris)."""

    class HeadTimeoutH11Protocol(H11Protocol):
        _head_deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:  # noqa: ANN001
            super().connection_made(transport)
            self._arm_head_deadline()

        def on_response_complete(self) -> None:
            self._arm_head_deadline()  # before the base class handles a pipelined next request
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
            super().connection_lost(exc)

        def _arm_head_deadline(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
            waiting_since = self.cycle
            self._head_deadline = self.loop.call_later(head_timeout_s, self._head_overdue, waiting_since)

        def _head_overdue(self, waiting_since) -> None:  # noqa: ANN001
            # A new request cycle since arming means its head arrived in time; its body is
            # bounded by the app's body timeout.
            if self.cycle is waiting_since and not self.transport.is_closing():
                self.transport.close()

    return HeadTimeoutH11Protocol


def uvicorn_config(app: FastAPI, host: str, port: int, settings: ServiceSettings) -> uvicorn.Config:
    return uvicorn.Config(
        app, host=host, port=port, http=protocol_with_head_timeout(settings.head_timeout_s),
        timeout_keep_alive=5, limit_concurrency=1_000, server_header=False, access_log=False,
        log_level="warning", lifespan="off",
    )


@dataclass
class RunningService:
    """A service started by `start_in_background`; `stop()` shuts it down and waits."""

    url: str
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self, timeout_s: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout_s)


def start_in_background(app: FastAPI, host: str = "127.0.0.1", port: int = 0,
                        settings: ServiceSettings = ServiceSettings()) -> RunningService:
    """Runs `app` on uvicorn in a daemon thread (port 0: a free port); returns once it listens."""
    server = uvicorn.Server(uvicorn_config(app, host, port, settings))
    thread = threading.Thread(target=server.run, name="upvotes-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the service did not start on {host}:{port}")
        time.sleep(0.01)
    bound_port = server.servers[0].sockets[0].getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    return RunningService(f"http://{shown}:{bound_port}", server, thread)


def serve_in_background(project: str, instance: str, database: str, topic: str | None = None,
                        host: str = "127.0.0.1", port: int = 0, staleness_s: float = 0.0, refresh_s: float = 1.0,
                        settings: ServiceSettings = ServiceSettings()) -> RunningService:
    """The whole service on one database (and votes topic, ID or path), started in a background
    thread: what `upvotes serve` runs, for the demo and tests. `.url` is the live page."""
    from pipeline.options import pubsub_path
    from spanner_store.database import open_database

    reader = CountsReader(open_database(project, instance, database), staleness_s=staleness_s, refresh_s=refresh_s)
    publisher = PubSubVotePublisher(pubsub_path(project, "topics", topic)) if topic else None
    return start_in_background(create_app(reader, publisher, settings), host, port, settings)
