"""The HTTP service app servers call (`upvotes serve`): exact counts, fresh top posts, and
validated vote publishing, on FastAPI + uvicorn.

    GET  /v1/posts/{post_id}        {"post_id", "upvotes", "shares", "as_of"} (a field per counter,
                                    schemas/counters.py); unknown posts read as zeros
    GET  /v1/posts?id=a&id=b        {"posts": [...]}
         (either, with ?unique=true) each count also has "unique_voters"
    GET  /v1/posts/{post_id}/votes/{user_id}
                                    that user's vote on that post, private (credential_gate.py): {"post_id", "user_id",
                                    "vote": "up"|"down"|"none", "voted_at", "event_id", "applied_at"}
                                    (upvotes/serving/user_votes.py); never voted: "none" and nulls
    GET  /v1/top?n=10               {"posts": [{"post_id", "upvotes", "shares"}...], "as_of", "exact", "bound", "folded_through"}
    GET  /v1/top?by=hot&n=10        what is viral now (spanner_reads/rankings/hot.py): the top posts by hot score, each
                                    post with "hot" (its score at the snapshot); the header adds "by": "hot",
                                    "half_life_hours", "considered", "candidate_rows". 503 when the database
                                    has no half-life recorded (run `upvotes provision`)
    GET  /v1/top?last=24h&n=10      the top posts by upvotes in the last N event hours (Nh or Nd, 1 to 720 h),
                                    each with "window_upvotes"; the header adds "by": "last", "hours", ...
                                    (by=upvotes, or no by, is the all-time answer; by=hot with last is 400)
    POST /v1/votes                  one JSON event (Content-Type application/json) or ndjson
                                    (application/x-ndjson), one event a line, with a credential:
                                    202 {"accepted": n, "rejected": [{"line", "error"}]}; 400 when nothing is valid
    GET  /healthz                   {"status": "ok", "spanner_reads": n, "limits": {...}, "refused": {...}}
    GET  /docs, /openapi.json       the OpenAPI description
    GET  /                          the live page (upvotes/serving/live_page.py), with its session cookie
    GET  /live-page.js, .css        its script and style

Where each part lives (the rooms of upvotes/serving/):

    service.py          this wiring: the app, its routers in the order they are matched, the guards
    routes/             one APIRouter per resource (routes/__init__.py lists them)
    credential_gate.py  who may write, or read a user's vote (docs/security.md)
    vote_ingest.py      what POST /v1/votes accepts (the pipeline's own parser) and how it is published
    json_errors.py      every error as JSON {"error": reason}, never a traceback
    runner.py           uvicorn, with a request-head timeout, in a background thread

Reads go through one spanner_reads.counts_reader.CountsReader per process, so a hot post costs at
most one Spanner read per refresh interval however many viewers ask.

Security (docs/security.md): every answer passes the Host allowlist (421) and carries the
security headers (upvotes/serving/http_guards.py); writes and a user's vote pass the credential
gate; bodies are limited to MAX_BODY_BYTES and MAX_EVENTS and must arrive within
`body_timeout_s`, a request head within `head_timeout_s`. CORS is off unless exact origins are
configured. /healthz shows the limits and how many requests each check refused.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp

from spanner_reads.counts_reader import DEFAULT_REFRESH_S, CountsReader
from upvotes.serving import json_errors
from upvotes.serving.credential_gate import REFUSALS, CredentialGate
from upvotes.serving.http_guards import HostAllowlist, SecurityHeaders
from upvotes.serving.live_sessions import LiveSessions
from upvotes.serving.routes import docs, health, page, posts, top, votes
from upvotes.serving.runner import RunningService, start_in_background
from upvotes.serving.serve_settings import ServiceSettings
from upvotes.serving.user_votes import SpannerVoteReader, VoteReader
from upvotes.serving.vote_ingest import MAX_BODY_BYTES, MAX_EVENTS, PubSubVotePublisher, VotePublisher

# The service's names for those who run it (`upvotes serve`, the demo, the tests): the app, the
# runner, the publisher and the body limits.
__all__ = [
    "MAX_BODY_BYTES",
    "MAX_EVENTS",
    "PubSubVotePublisher",
    "RunningService",
    "ServiceSettings",
    "create_app",
    "serve_in_background",
    "start_in_background",
]


def create_app(
    reader: CountsReader,
    vote_reader: VoteReader,
    publisher: VotePublisher | None,
    settings: ServiceSettings,
    clock: Callable[[], float] = time.time,
    monotonic: Callable[[], float] = time.monotonic,
) -> ASGIApp:
    """The service's ASGI app: the routers behind the Host allowlist, CORS (only when origins are
    configured) and the security headers. `reader` answers counts and top posts, `vote_reader` a
    user's vote. `publisher` None: POST /v1/votes answers 503 (no topic configured). `clock` is
    wall time (votes, sessions), `monotonic` the rate limits' time."""
    app = FastAPI(
        title="upvotes",
        version="1",
        description="Exact upvote and share counts of viral posts.",
        docs_url=None,
        redoc_url=None,
    )
    json_errors.install(app)
    sessions = LiveSessions(settings.write_tokens[0], settings.session_s)
    gate = CredentialGate(settings, sessions, clock, monotonic)
    refused: Counter[str] = Counter({kind: 0 for kind in REFUSALS})
    # In the order they are matched: votes before posts, whose post ID would take ".../votes/<user>".
    for router in (
        page.router(sessions, clock),
        docs.router(app.openapi_url or "/openapi.json"),
        health.router(reader, settings, refused),
        votes.router(gate, vote_reader, publisher, settings, refused, clock),
        posts.router(reader),
        top.router(reader),
    ):
        app.include_router(router)

    guarded: ASGIApp = app
    if settings.cors_origins:  # exact origins, bearer tokens only: no cookies, so no credentials mode
        guarded = CORSMiddleware(
            app,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
            allow_credentials=False,
        )

    def host_refused() -> None:
        refused["host"] += 1

    return SecurityHeaders(HostAllowlist(guarded, settings.allowed_hosts, host_refused))


def serve_in_background(
    project: str,
    instance: str,
    database: str,
    topic: str | None,
    settings: ServiceSettings,
    host: str = "127.0.0.1",
    port: int = 0,
    staleness_s: float = 0.0,
    refresh_s: float = DEFAULT_REFRESH_S,
) -> RunningService:
    """The whole service on one database (and votes topic, ID or path), started in a background
    thread: what `upvotes serve` runs, for the demo and tests. `.url` is the live page."""
    from pipeline.params import pubsub_path
    from spanner_store.database import open_database

    spanner = open_database(project, instance, database)
    reader = CountsReader(spanner, staleness_s=staleness_s, refresh_s=refresh_s)
    publisher = PubSubVotePublisher(pubsub_path(project, "topics", topic)) if topic else None
    app = create_app(reader, SpannerVoteReader(spanner), publisher, settings)
    return start_in_background(app, settings, host, port)
