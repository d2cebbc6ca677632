"""Votes, behind the credential gate (upvotes/serving/credential_gate.py): GET a user's vote on a
post, private, and POST /v1/votes, published to the votes topic (upvotes/serving/vote_ingest.py).

A user's vote is one strong point read (upvotes/serving/user_votes.py). Its route must be matched
before the counts route (upvotes/serving/routes/posts.py), whose post ID may hold "/": the path is
split at its LAST "/votes/", so the post ID may hold anything and the user ID anything but
"/votes/"; a post ID that itself holds "/votes/" is read with GET /v1/posts?id=.

A live-page session is one voter (its user ID, upvotes/serving/live_sessions.py): it reads only
its own user's votes and sends one application/json vote-state event of its own user per request;
anything else is refused (403) and counted as "session_scope". The reply to a write comes after
Pub/Sub has accepted the message.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from schemas.contract import events_message, reason_of
from upvotes.serving.credential_gate import CredentialGate, Refusal
from upvotes.serving.json_errors import error
from upvotes.serving.live_sessions import Session
from upvotes.serving.routes.ids import check_post_id, check_user_id
from upvotes.serving.serve_settings import ServiceSettings
from upvotes.serving.user_votes import VoteReader, vote_json
from upvotes.serving.vote_ingest import VotePublisher, outside_session_scope, read_body, validate_votes


def router(
    gate: CredentialGate,
    vote_reader: VoteReader,
    publisher: VotePublisher | None,
    settings: ServiceSettings,
    refused: Counter[str],
    clock: Callable[[], float],
) -> APIRouter:
    """`publisher` None: POST /v1/votes answers 503 (no topic configured). `refused` counts each
    refusal by its kind, for /healthz."""
    sessions = gate.sessions
    routes = APIRouter()

    def refuse(refusal: Refusal) -> JSONResponse:
        refused[refusal.kind] += 1
        return error(refusal.status, refusal.reason, refusal.headers)

    # Both parameters may hold "/": the path splits at its last "/votes/" (module docstring).
    @routes.get(
        "/v1/posts/{post_id:path}/votes/{user_id:path}",
        summary="One user's vote on one post (private: a bearer token, or the live page's session for its user)",
    )
    async def read_vote(request: Request, post_id: str, user_id: str) -> Response:
        credential = gate.admit_read(request)
        if isinstance(credential, Refusal):
            return refuse(credential)
        check_post_id(post_id)
        check_user_id(user_id)
        if isinstance(credential, Session) and user_id != sessions.user_id(credential):
            return refuse(
                Refusal(
                    "session_scope",
                    403,
                    f"a live-page session reads only its own user's votes ({sessions.user_id(credential)})",
                )
            )
        stored = await run_in_threadpool(vote_reader.vote_of, post_id, user_id)
        return JSONResponse(vote_json(post_id, user_id, stored))

    @routes.post(
        "/v1/votes",
        status_code=202,
        summary="Publish votes (one JSON event, or ndjson) with a bearer token or the live page's session",
    )
    async def post_votes(request: Request) -> Response:
        credential = gate.admit(request)
        if isinstance(credential, Refusal):
            return refuse(credential)
        if publisher is None:
            return error(503, "this server publishes no votes: start it with --topic")
        body = await read_body(request, settings.body_timeout_s)
        one_event = request.headers["content-type"].split(";")[0].strip().lower() == "application/json"
        if isinstance(credential, Session):
            if not one_event:
                return error(400, "a live-page session sends one application/json event per request")
            beyond = outside_session_scope(body, sessions.user_id(credential), clock())
            if beyond is not None:
                return refuse(Refusal("session_scope", 403, beyond))
        validated = validate_votes(body, one_event, clock(), settings.max_delta)
        if validated.whole is not None:
            return error(
                413 if reason_of(validated.whole) in ("too_many_events", "too_large") else 400, validated.whole.error
            )
        if not validated.events:
            return JSONResponse(
                {"error": "no valid event", "accepted": 0, "rejected": validated.rejected}, status_code=400
            )
        message = events_message(validated.events)  # the contract's encoding, as `upvotes publish`'s
        await run_in_threadpool(publisher.publish, message.data, message.attributes)
        return JSONResponse({"accepted": len(validated.events), "rejected": validated.rejected}, status_code=202)

    return routes
