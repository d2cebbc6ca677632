"""`upvotes serve` secure by default, over real HTTP: uvicorn on free loopback ports, httpx as
the client, the Pub/Sub emulator's topic behind it. Every hostile request is refused AND
nothing reaches the topic (tests/support/topic_audit.py: a marker published straight to the topic,
and everything up to it pulled from the module's subscription):

- cross-site simple POSTs (text/plain, form-urlencoded, multipart), with and without Origin;
- a foreign Host (DNS rebinding), on reads and writes;
- a foreign Origin, `null` included, with a valid token or session;
- a missing, wrong, tampered, expired or rotated credential;
- an anti-CSRF token replayed from another session;
- a live-page session voting as another user, or sending a delta event;
- bursts past each rate limit (per token, per session, per client address);
- deltas beyond a token's cap.

A user's vote (GET /v1/posts/{post}/votes/{user}) is private: it is read with a token or by
the user's own live-page session, and refused to anyone else, each refusal counted.

Also: the security headers on every answer, CORS only for exact configured origins, the
limits in /healthz, the generated token (printed once, mode 0600, new at every start), the
docs' flag table, and the pure pieces (token buckets, sessions, header parsing).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import socket
import stat
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from schemas.contract import parse_vote
from schemas.records import PostUser, VoteState
from spanner_reads.counts_reader import CountsReader
from spanner_writes.votes import apply_all_vote_states
from tests.support.topic_audit import TopicAudit
from upvotes.serving.http_guards import host_of, json_media_type, origin_key
from upvotes.serving.live_page import CSRF_META, USER_META
from upvotes.serving.live_sessions import COOKIE, CSRF_HEADER, USER_PREFIX, LiveSessions, Session, SessionRefused
from upvotes.serving.rate_limits import TokenBuckets, retry_after
from upvotes.serving.serve_settings import (
    BURST_SECONDS,
    InvalidServeSetting,
    ServiceSettings,
    allowed_hosts_for,
    flags_table_markdown,
    readme_table,
)
from upvotes.serving.service import PubSubVotePublisher, create_app, start_in_background
from upvotes.serving.user_votes import SpannerVoteReader
from upvotes.serving.write_credentials import CredentialError, resolve_write_credential, write_token_file

REPO = Path(__file__).resolve().parent.parent
TOKEN = "test-token-" + "x" * 32
OTHER_TOKEN = "rotated-token-" + "y" * 32
EVIL_ORIGIN = "http://evil.localhost:8666"
EVENT = {"post_id": "target", "counter": "upvotes", "delta": 1}
SESSION_S = 600.0


class SkewedClock:
    """Wall time plus a skew a test can move forward (to expire sessions)."""

    def __init__(self) -> None:
        self.skew_s = 0.0

    def __call__(self) -> float:
        return time.time() + self.skew_s


@pytest.fixture(scope="module")
def start_service(stack, database):
    """Starts services on the module's topic with settings overriding generous defaults."""
    running = []

    def start(clock=time.time, **overrides):
        base = dict(
            write_tokens=(TOKEN,),
            session_s=SESSION_S,
            token_writes_per_s=1000.0,
            session_writes_per_s=1000.0,
            client_writes_per_s=1000.0,
        )
        settings = ServiceSettings(**{**base, **overrides})
        app = create_app(
            CountsReader(database, refresh_s=0.0),
            SpannerVoteReader(database),
            PubSubVotePublisher(stack.topic_path(stack.topic)),
            settings,
            clock=clock,
        )
        service = start_in_background(app, settings)
        running.append(service)
        return service

    yield start
    for service in running:
        service.stop()


@pytest.fixture(scope="module")
def clock() -> SkewedClock:
    return SkewedClock()


@pytest.fixture(scope="module")
def service(start_service, clock):
    return start_service(clock=clock)


@pytest.fixture
def client(service):
    with httpx.Client(base_url=service.url, timeout=30) as http:
        yield http


@pytest.fixture(scope="module")
def published_since(stack):
    """Call it after the requests under test: every message published to the topic since the
    previous call (tests/support/topic_audit.py)."""
    audit = TopicAudit(stack.topic_path(stack.topic), stack.subscription_path(stack.subscription))
    yield audit.published_since
    audit.close()


def new_session(url: str) -> tuple[str, str, str]:
    """(session cookie value, anti-CSRF token, user ID) of a fresh load of the live page."""
    page = httpx.get(url + "/", timeout=30)
    assert page.status_code == 200
    token = re.search(rf'<meta name="{CSRF_META}" content="([^"]+)">', page.text)
    user_id = re.search(rf'<meta name="{USER_META}" content="([^"]+)">', page.text)
    assert token is not None and user_id is not None, page.text
    return page.cookies[COOKIE], token[1], user_id[1]


def state_event(user_id: str, vote: str = "up", post_id: str = "target", **extra: str) -> dict:
    """A vote-state event of `user_id`, timed now: what the live page sends."""
    return {
        "post_id": post_id,
        "user_id": user_id,
        "vote": vote,
        "event_time": datetime.now(timezone.utc).isoformat(),
        **extra,
    }


def vote_path(post_id: str, user_id: str) -> str:
    """GET path of one user's vote on one post."""
    return f"/v1/posts/{quote(post_id, safe='')}/votes/{quote(user_id, safe='')}"


def session_headers(cookie: str, csrf: str | None = None, **extra: str) -> dict:
    headers = {"Cookie": f"{COOKIE}={cookie}", "Content-Type": "application/json", **extra}
    if csrf is not None:
        headers[CSRF_HEADER] = csrf
    return headers


def bearer(token: str = TOKEN) -> dict:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def refused_counts(url: str) -> dict:
    return httpx.get(url + "/healthz", timeout=30).json()["refused"]


# --- security headers ---------------------------------------------------------------------------


def test_every_answer_carries_the_security_headers(client) -> None:
    answers = {
        path: client.get(path)
        for path in (
            "/",
            "/healthz",
            "/v1/top",
            "/v1/posts/x",
            "/nowhere",
            "/live-page.js",
            "/live-page.css",
            "/docs",
            "/openapi.json",
        )
    }
    answers["421"] = client.get("/healthz", headers={"Host": "evil.example"})
    answers["415"] = client.post("/v1/votes", content=b"{}", headers={"Content-Type": "text/plain"})
    answers["401"] = client.post("/v1/votes", json=EVENT)
    answers["vote 401"] = client.get(vote_path("x", "u"))
    for what, answer in answers.items():
        headers = answer.headers
        assert headers["x-content-type-options"] == "nosniff", what
        assert headers["referrer-policy"] == "no-referrer", what
        assert headers["cache-control"] == "no-store", what
        assert headers["x-frame-options"] == "DENY", what
        assert "frame-ancestors 'none'" in headers["content-security-policy"], what
    assert answers["421"].status_code == 421 and answers["/nowhere"].status_code == 404
    api_csp = answers["/healthz"].headers["content-security-policy"]
    assert api_csp.startswith("default-src 'none'")


def test_the_page_runs_no_inline_script_and_its_policy_allows_only_its_own_files(client) -> None:
    page = client.get("/")
    csp = dict(part.strip().split(" ", 1) for part in page.headers["content-security-policy"].split(";"))
    assert csp["default-src"] == "'none'" and csp["script-src"] == "'self'" and csp["style-src"] == "'self'"
    assert csp["connect-src"] == "'self'" and csp["frame-ancestors"] == "'none'"
    assert "unsafe" not in page.headers["content-security-policy"]
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", page.text, re.S)
    assert scripts and all('src="/' in attributes and body == "" for attributes, body in scripts)
    assert "<style" not in page.text and not re.search(
        r"<[^>]*\s(style|on\w+)=", page.text
    )  # no inline style or handler
    # /docs keeps Swagger UI's inline bootstrap script, allowed by its hash and nothing else inline.
    docs = client.get("/docs")
    inline = re.findall(r"<script>(.*?)</script>", docs.text, re.S)
    digest = base64.b64encode(hashlib.sha256(inline[0].encode()).digest()).decode()
    script_src = next(p for p in docs.headers["content-security-policy"].split(";") if "script-src" in p)
    assert f"'sha256-{digest}'" in script_src and "unsafe" not in script_src


# --- cross-site simple requests -----------------------------------------------------------------

SIMPLE_BODIES = {  # what a <form> or a no-cors fetch() can send cross-site without a preflight
    "text/plain": (json.dumps(EVENT | {"delta": 1_000_000}).encode(), "text/plain"),
    "form-urlencoded": (
        b'{"post_id":"target","counter":"upvotes","delta":1000000,"pad":"=x"}',
        "application/x-www-form-urlencoded",
    ),
    "multipart": (
        b'--b\r\nContent-Disposition: form-data; name="{\\"post_id\\":\\"target\\",\\"counter\\":'
        b'\\"upvotes\\",\\"delta\\":1000000}"\r\n\r\nx\r\n--b--\r\n',
        "multipart/form-data; boundary=b",
    ),
}


@pytest.mark.parametrize("kind", sorted(SIMPLE_BODIES))
def test_cross_site_simple_posts_are_refused(kind, service, client, published_since) -> None:
    body, content_type = SIMPLE_BODIES[kind]
    cookie, _, _ = new_session(service.url)
    with_origin = client.post(
        "/v1/votes",
        content=body,
        headers={"Content-Type": content_type, "Origin": EVIL_ORIGIN, "Cookie": f"{COOKIE}={cookie}"},
    )
    without_origin = client.post(
        "/v1/votes", content=body, headers={"Content-Type": content_type, "Cookie": f"{COOKIE}={cookie}"}
    )
    with_token = client.post("/v1/votes", content=body, headers={**bearer(), "Content-Type": content_type})
    assert with_origin.status_code == 403 and "origin" in with_origin.json()["error"]
    assert without_origin.status_code == 415 and with_token.status_code == 415
    assert "application/json" in with_token.json()["error"]
    assert published_since() == []


def test_json_with_a_charset_is_accepted_and_other_charsets_are_not(client, published_since) -> None:
    good = client.post(
        "/v1/votes",
        content=json.dumps(EVENT).encode(),
        headers={**bearer(), "Content-Type": "application/json; charset=UTF-8"},
    )
    bad = client.post(
        "/v1/votes",
        content=json.dumps(EVENT).encode(),
        headers={**bearer(), "Content-Type": "application/json; charset=utf-16"},
    )
    assert (good.status_code, bad.status_code) == (202, 415)
    assert [json.loads(m.data)["post_id"] for m in published_since()] == ["target"]


# --- Host and Origin --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:{port}",
        "127.0.0.1.evil.example",
        "localhost.",
        "[::2]:{port}",
        "127.0.0.1@evil.example",
    ],
)
def test_a_foreign_host_is_refused_on_reads_and_writes(host, service, client, published_since) -> None:
    host = host.format(port=service.url.rsplit(":", 1)[1])
    before = refused_counts(service.url)["host"]
    page = client.get("/", headers={"Host": host})
    read = client.get("/v1/posts/target", headers={"Host": host})
    write = client.post("/v1/votes", json=EVENT, headers={**bearer(), "Host": host})
    for answer in (page, read, write):
        assert answer.status_code == 421 and "--allowed-host" in answer.json()["error"]
    assert "set-cookie" not in page.headers  # no session for a rebound name
    assert refused_counts(service.url)["host"] == before + 3
    assert published_since() == []


def test_a_request_without_a_host_header_is_refused(service, published_since) -> None:
    host, port = service.url.removeprefix("http://").split(":")
    body = json.dumps(EVENT).encode()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/votes HTTP/1.0\r\nAuthorization: Bearer "
            + TOKEN.encode()
            + b"\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
        )
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 421") or reply.startswith(b"HTTP/1.0 421"), reply[:80]
    assert published_since() == []


@pytest.mark.parametrize(
    "origin",
    [
        EVIL_ORIGIN,
        "null",
        "https://127.0.0.1:{port}",
        "http://127.0.0.1:1",
        "http://localhost:{port}.evil.example",
        "garbage",
    ],
)
def test_a_foreign_origin_cannot_write_with_a_token_or_a_session(origin, service, client, published_since) -> None:
    origin = origin.format(port=service.url.rsplit(":", 1)[1])
    cookie, csrf, _ = new_session(service.url)
    with_token = client.post("/v1/votes", json=EVENT, headers={**bearer(), "Origin": origin})
    with_session = client.post("/v1/votes", json=EVENT, headers=session_headers(cookie, csrf, Origin=origin))
    for answer in (with_token, with_session):
        assert answer.status_code == 403 and "origin" in answer.json()["error"]
    assert published_since() == []


def test_the_own_origin_with_a_session_or_a_token_writes(service, client, published_since) -> None:
    cookie, csrf, user = new_session(service.url)
    by_page = client.post(
        "/v1/votes", json=state_event(user, event_id="page"), headers=session_headers(cookie, csrf, Origin=service.url)
    )
    by_token = client.post("/v1/votes", json=EVENT | {"event_id": "app", "delta": 500}, headers=bearer())
    by_localhost = client.post(
        "/v1/votes",
        json=EVENT | {"event_id": "localhost"},
        headers={**bearer(), "Host": "localhost", "Origin": "http://localhost"},
    )
    assert (by_page.status_code, by_token.status_code, by_localhost.status_code) == (202, 202, 202)
    assert sorted(m.attributes["event_id"] for m in published_since()) == ["app", "localhost", "page"]


def test_cors_answers_only_configured_exact_origins(start_service, published_since) -> None:
    app_origin = "https://app.example"
    url = start_service(cors_origins=(app_origin,)).url
    preflight = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type",
    }
    allowed = httpx.options(url + "/v1/votes", headers={**preflight, "Origin": app_origin})
    foreign = httpx.options(url + "/v1/votes", headers={**preflight, "Origin": EVIL_ORIGIN})
    assert allowed.headers["access-control-allow-origin"] == app_origin
    assert "access-control-allow-credentials" not in allowed.headers
    assert "access-control-allow-origin" not in foreign.headers
    evil = httpx.post(url + "/v1/votes", json=EVENT, headers={**bearer(), "Origin": EVIL_ORIGIN})
    assert evil.status_code == 403
    assert published_since() == []
    app = httpx.post(url + "/v1/votes", json=EVENT | {"event_id": "cors"}, headers={**bearer(), "Origin": app_origin})
    assert app.status_code == 202 and app.headers["access-control-allow-origin"] == app_origin
    assert [m.attributes["event_id"] for m in published_since()] == ["cors"]


@pytest.mark.parametrize(
    "origin", ["*", "https://*.example.com", "https://app.example/path", "app.example", "https://user:pw@app.example"]
)
def test_cors_refuses_anything_but_an_exact_origin(origin) -> None:
    with pytest.raises(InvalidServeSetting, match="not an exact origin"):
        ServiceSettings(write_tokens=(TOKEN,), cors_origins=(origin,))


def test_no_cors_headers_without_configured_origins(client) -> None:
    preflight = client.options("/v1/votes", headers={"Origin": EVIL_ORIGIN, "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in preflight.headers
    assert "access-control-allow-origin" not in client.get("/healthz", headers={"Origin": EVIL_ORIGIN}).headers


# --- credentials -----------------------------------------------------------------------------------


def test_a_missing_wrong_or_tampered_credential_is_refused(service, client, published_since) -> None:
    cookie, csrf, _ = new_session(service.url)
    session_id, expires, mac = cookie.split(".")
    tampered_mac = f"{session_id}.{expires}.{'A' if mac[0] != 'A' else 'B'}{mac[1:]}"
    extended = f"{session_id}.{int(expires) + 3600}.{mac}"
    answers = {
        "none": client.post("/v1/votes", json=EVENT),
        "wrong token": client.post("/v1/votes", json=EVENT, headers=bearer(TOKEN + "z")),
        "not bearer": client.post("/v1/votes", json=EVENT, headers={"Authorization": f"Basic {TOKEN}"}),
        "empty bearer": client.post("/v1/votes", json=EVENT, headers={"Authorization": "Bearer"}),
        "tampered cookie": client.post("/v1/votes", json=EVENT, headers=session_headers(tampered_mac, csrf)),
        "extended cookie": client.post("/v1/votes", json=EVENT, headers=session_headers(extended, csrf)),
        "token only": client.post("/v1/votes", json=EVENT, headers={CSRF_HEADER: csrf}),
    }
    for what, answer in answers.items():
        assert answer.status_code == 401, what
        assert answer.headers["www-authenticate"] == "Bearer", what
    # A wrong bearer token is not rescued by a valid session riding along.
    both = client.post("/v1/votes", json=EVENT, headers={**session_headers(cookie, csrf), **bearer(TOKEN + "z")})
    assert both.status_code == 401
    assert published_since() == []


def test_an_expired_session_is_refused(service, client, clock, published_since) -> None:
    cookie, csrf, _ = new_session(service.url)
    clock.skew_s = SESSION_S + 1
    try:
        expired = client.post("/v1/votes", json=EVENT, headers=session_headers(cookie, csrf))
        renewed = client.get("/", headers={"Cookie": f"{COOKIE}={cookie}"})
    finally:
        clock.skew_s = 0.0
    assert expired.status_code == 401 and "expired" in expired.json()["error"]
    assert renewed.cookies[COOKIE] != cookie  # reloading the page gives a new session
    assert published_since() == []


def test_a_rotated_token_and_its_sessions_are_refused(start_service, service, published_since) -> None:
    """A service restarted with a new token (the rotation) refuses the old token and every
    session signed under it; with both tokens configured it takes both."""
    cookie, csrf, _ = new_session(service.url)
    rotated = start_service(write_tokens=(OTHER_TOKEN,)).url
    old_token = httpx.post(rotated + "/v1/votes", json=EVENT, headers=bearer(TOKEN))
    old_session = httpx.post(rotated + "/v1/votes", json=EVENT, headers=session_headers(cookie, csrf))
    assert old_token.status_code == 401 and old_session.status_code == 401
    assert "rotated" in old_session.json()["error"]
    assert published_since() == []
    both = start_service(write_tokens=(OTHER_TOKEN, TOKEN)).url
    answers = [
        httpx.post(both + "/v1/votes", json=EVENT | {"event_id": token[:5]}, headers=bearer(token))
        for token in (TOKEN, OTHER_TOKEN)
    ]
    assert [a.status_code for a in answers] == [202, 202]
    assert sorted(m.attributes["event_id"] for m in published_since()) == ["rotat", "test-"]


def test_a_csrf_token_replayed_from_another_session_is_refused(service, client, published_since) -> None:
    cookie_a, csrf_a, _ = new_session(service.url)
    cookie_b, csrf_b, _ = new_session(service.url)
    assert cookie_a != cookie_b and csrf_a != csrf_b
    answers = [
        client.post("/v1/votes", json=EVENT, headers=session_headers(cookie_a, csrf_b)),
        client.post("/v1/votes", json=EVENT, headers=session_headers(cookie_b, csrf_a)),
        client.post("/v1/votes", json=EVENT, headers=session_headers(cookie_a)),  # what a form sends
        client.post("/v1/votes", json=EVENT, headers=session_headers(cookie_a, csrf_a[:-1] + "x")),
    ]
    for answer in answers:
        assert answer.status_code == 403 and CSRF_HEADER in answer.json()["error"]
    assert published_since() == []


def test_a_reloaded_page_keeps_its_session_until_half_its_life(service, client, clock) -> None:
    """Two tabs of the live page share one session: a reload must not break the other tab."""
    cookie, csrf, _ = new_session(service.url)
    again = client.get("/", headers={"Cookie": f"{COOKIE}={cookie}"})
    assert COOKIE not in again.cookies and csrf in again.text
    clock.skew_s = SESSION_S * 0.6
    try:
        late = client.get("/", headers={"Cookie": f"{COOKIE}={cookie}"})
    finally:
        clock.skew_s = 0.0
    assert late.cookies[COOKIE] != cookie and csrf not in late.text  # renewed before it expires
    first = httpx.get(service.url + "/")
    set_cookie = first.headers["set-cookie"].lower()
    for attribute in ("httponly", "samesite=strict", "path=/", f"max-age={int(SESSION_S)}"):
        assert attribute in set_cookie
    assert "secure" not in set_cookie and "domain=" not in set_cookie  # plain http here; host-only


# --- abuse limits -----------------------------------------------------------------------------------

SLOW = 0.05  # writes per second: a bucket of 1 that takes 20 s to refill, so a quick burst meets it


def test_a_burst_past_the_token_rate_limit_gets_429(start_service, published_since) -> None:
    url = start_service(token_writes_per_s=SLOW).url
    answers = [
        httpx.post(url + "/v1/votes", json=EVENT | {"event_id": f"burst-{i}"}, headers=bearer()) for i in range(4)
    ]
    assert [a.status_code for a in answers] == [202, 429, 429, 429]
    assert all(10 <= int(a.headers["retry-after"]) <= 20 for a in answers[1:])
    assert refused_counts(url)["rate_limited"] == 3
    assert [m.attributes["event_id"] for m in published_since()] == ["burst-0"]


def test_a_burst_past_the_session_rate_limit_gets_429(start_service, published_since) -> None:
    url = start_service(session_writes_per_s=SLOW).url
    cookie, csrf, user = new_session(url)
    answers = [
        httpx.post(
            url + "/v1/votes", json=state_event(user, event_id=f"click-{i}"), headers=session_headers(cookie, csrf)
        )
        for i in range(3)
    ]
    assert [a.status_code for a in answers] == [202, 429, 429]
    other_cookie, other_csrf, other_user = new_session(url)  # another session has its own bucket
    other = httpx.post(
        url + "/v1/votes",
        json=state_event(other_user, event_id="other"),
        headers=session_headers(other_cookie, other_csrf),
    )
    assert other.status_code == 202
    assert sorted(m.attributes["event_id"] for m in published_since()) == ["click-0", "other"]


def test_new_sessions_do_not_escape_the_client_address_limit(start_service, published_since) -> None:
    url = start_service(client_writes_per_s=SLOW).url
    answers = []
    for i in range(3):
        cookie, csrf, user = new_session(url)
        answers.append(
            httpx.post(
                url + "/v1/votes", json=state_event(user, event_id=f"s-{i}"), headers=session_headers(cookie, csrf)
            )
        )
    unauthenticated = httpx.post(url + "/v1/votes", json=EVENT)  # refused attempts are throttled too
    assert [a.status_code for a in answers] == [202, 429, 429] and unauthenticated.status_code == 429
    token = httpx.post(url + "/v1/votes", json=EVENT | {"event_id": "app"}, headers=bearer())
    assert token.status_code == 202  # an app server's token has its own limit
    assert sorted(m.attributes["event_id"] for m in published_since()) == ["app", "s-0"]


def test_deltas_beyond_a_tokens_cap_are_rejected_and_a_token_sends_both_kinds(start_service, published_since) -> None:
    url = start_service(max_delta=100).url
    big_app = httpx.post(url + "/v1/votes", json=EVENT | {"delta": -101}, headers=bearer())
    assert big_app.status_code == 400 and "±100" in big_app.json()["rejected"][0]["error"]
    assert published_since() == []
    lines = [
        EVENT | {"delta": 100, "event_id": "a"},
        EVENT | {"delta": 101},
        EVENT | {"delta": -100},
        state_event("app-user-1", vote="down"),
    ]  # a vote-state event has no delta, so no cap
    batch = httpx.post(
        url + "/v1/votes",
        content="\n\n".join(json.dumps(line) for line in lines).encode(),
        headers={**bearer(), "Content-Type": "application/x-ndjson"},
    )
    one_state = httpx.post(url + "/v1/votes", json=state_event("app-user-2", event_id="state"), headers=bearer())
    assert batch.status_code == 202 and batch.json()["accepted"] == 3
    assert [r["line"] for r in batch.json()["rejected"]] == [3]  # blank lines count, as in the pipeline
    assert one_state.status_code == 202
    messages = published_since()
    assert sorted(m.attributes.get("format", "v1") for m in messages) == ["ndjson", "v1"]
    events = [json.loads(line) for m in messages for line in m.data.split(b"\n")]
    assert sorted(e["delta"] for e in events if "delta" in e) == [-100, 100]
    assert sorted((e["user_id"], e["vote"]) for e in events if "vote" in e) == [
        ("app-user-1", "down"),
        ("app-user-2", "up"),
    ]


# --- one voter per live-page session -------------------------------------------------------------


def test_a_session_is_one_voter_and_sends_only_its_own_vote_states(service, client, published_since) -> None:
    cookie, csrf, user = new_session(service.url)
    _, _, other_user = new_session(service.url)
    again = client.get("/", headers={"Cookie": f"{COOKIE}={cookie}"})  # a reload keeps the session's user
    assert f'<meta name="{USER_META}" content="{user}">' in again.text
    assert user != other_user and user.startswith(USER_PREFIX) and len(user) <= 128
    assert cookie.split(".")[0] not in user  # the user ID gives away no part of the cookie
    before = refused_counts(service.url)["session_scope"]
    as_other = client.post("/v1/votes", json=state_event(other_user), headers=session_headers(cookie, csrf))
    as_app_user = client.post("/v1/votes", json=state_event("app-user-7"), headers=session_headers(cookie, csrf))
    delta = client.post("/v1/votes", json=EVENT, headers=session_headers(cookie, csrf))
    batch = client.post(
        "/v1/votes",
        content=json.dumps(state_event(user)).encode(),
        headers={**session_headers(cookie, csrf), "Content-Type": "application/x-ndjson"},
    )
    for answer in (as_other, as_app_user):
        assert answer.status_code == 403 and f"only as its own user {user!r}" in answer.json()["error"]
    assert delta.status_code == 403 and "delta events need a bearer token" in delta.json()["error"]
    assert batch.status_code == 400 and "one application/json event" in batch.json()["error"]
    assert refused_counts(service.url)["session_scope"] == before + 3
    assert published_since() == []
    own = client.post("/v1/votes", json=state_event(user, event_id="own"), headers=session_headers(cookie, csrf))
    by_app = client.post("/v1/votes", json=state_event(other_user, "down", event_id="app"), headers=bearer())
    assert (own.status_code, by_app.status_code) == (202, 202)  # a token may vote as any user
    published = sorted(
        (m.attributes["event_id"], json.loads(m.data)["user_id"], json.loads(m.data)["vote"]) for m in published_since()
    )
    assert published == [("app", other_user, "down"), ("own", user, "up")]


# --- a user's vote is private ---------------------------------------------------------------------


def apply_states(database, *events: dict) -> None:
    """Vote-state events applied to the Votes table through the stream's own path."""
    states = {}
    for event in events:
        state = parse_vote(json.dumps(event).encode(), None, time.time())
        assert isinstance(state, VoteState), state
        states[PostUser(state.post_id, state.user_id)] = state.latest()
    apply_all_vote_states(database, states)


def test_a_users_vote_is_read_with_a_token_or_by_its_own_session(service, client, database) -> None:
    cookie, csrf, user = new_session(service.url)
    apply_states(database, state_event(user, post_id="mine", event_id="mine-1"))
    by_session = client.get(vote_path("mine", user), headers=session_headers(cookie, csrf))
    by_token = client.get(vote_path("mine", user), headers=bearer())
    assert by_session.status_code == by_token.status_code == 200
    assert by_session.json() == by_token.json()
    assert by_session.json()["vote"] == "up" and by_session.json()["event_id"] == "mine-1"
    never = client.get(vote_path("never-voted", user), headers=session_headers(cookie, csrf))
    assert never.status_code == 200 and (never.json()["vote"], never.json()["voted_at"]) == ("none", None)


def test_a_users_vote_is_refused_to_anyone_else(service, client) -> None:
    cookie, csrf, user = new_session(service.url)
    other_cookie, other_csrf, _ = new_session(service.url)
    path = vote_path("mine", user)
    before = refused_counts(service.url)
    answers = {
        "no credential": (client.get(path), 401, "credential"),
        "wrong token": (client.get(path, headers=bearer(TOKEN + "z")), 401, "credential"),
        "the cookie alone": (client.get(path, headers=session_headers(cookie)), 403, "csrf"),
        "another session's anti-CSRF token": (
            client.get(path, headers=session_headers(cookie, other_csrf)),
            403,
            "csrf",
        ),
        "another session": (client.get(path, headers=session_headers(other_cookie, other_csrf)), 403, "session_scope"),
        "a foreign origin, with the session": (
            client.get(path, headers=session_headers(cookie, csrf, Origin=EVIL_ORIGIN)),
            403,
            "origin",
        ),
        "a foreign origin, with a token": (
            client.get(path, headers={**bearer(), "Origin": EVIL_ORIGIN}),
            403,
            "origin",
        ),
    }
    for what, (answer, status, _) in answers.items():
        assert answer.status_code == status, what
        assert set(answer.json()) == {"error"}, what  # a reason, and nothing of the vote
    assert answers["no credential"][0].headers["www-authenticate"] == "Bearer"
    assert "own user" in answers["another session"][0].json()["error"]
    refused = refused_counts(service.url)
    for kind in ("credential", "csrf", "session_scope", "origin"):
        expected = sum(1 for _, _, counted_as in answers.values() if counted_as == kind)
        assert refused[kind] - before[kind] == expected, kind


def test_healthz_shows_the_limits(start_service) -> None:
    url = start_service(
        max_delta=250, token_writes_per_s=7.0, session_writes_per_s=3.0, client_writes_per_s=9.0, session_s=1800.0
    ).url
    limits = httpx.get(url + "/healthz").json()["limits"]
    assert limits == {
        "max_delta": {"token": 250},
        "writes_per_second": {"token": 7.0, "live_page_session": 3.0, "client_address": 9.0},
        "burst_seconds": BURST_SECONDS,
        "session_seconds": 1800.0,
    }


# --- the generated token ---------------------------------------------------------------------------


def start_serve(stack, cwd: Path, env: dict) -> tuple[subprocess.Popen, str]:
    command = [
        sys.executable,
        "-m",
        "upvotes.cli",
        "serve",
        f"--project={stack.project}",
        f"--instance={stack.instance}",
        f"--database={stack.database}",
        "--port=0",
    ]
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stderr is not None  # both pipes
    line = process.stdout.readline()
    assert line.startswith("upvotes serve: "), line + process.stderr.read()
    return process, line.split()[2].rstrip("/")


def stop_serve(process: subprocess.Popen) -> str:
    process.terminate()
    out, _ = process.communicate(timeout=30)
    return out


def test_serve_generates_a_token_prints_it_once_keeps_it_0600_and_renews_it_at_start(stack, tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "UPVOTES_WRITE_TOKEN"}
    env["PYTHONPATH"] = str(REPO)
    token_file = tmp_path / ".upvotes" / "serve-token"
    process, url = start_serve(stack, tmp_path, env)
    try:
        assert process.stdout is not None  # a pipe (start_serve)
        token_line = process.stdout.readline()
        token = token_file.read_text().strip()
        assert token_line.strip().endswith(token) and len(token) >= 40
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
        no_topic = httpx.post(url + "/v1/votes", json=EVENT, headers=bearer(token))
        assert no_topic.status_code == 503  # past the credential check: this serve has no --topic
    finally:
        rest = stop_serve(process)
    assert token not in rest  # printed once
    process, url = start_serve(stack, tmp_path, env)
    try:
        renewed = token_file.read_text().strip()
        assert renewed != token
        assert httpx.post(url + "/v1/votes", json=EVENT, headers=bearer(token)).status_code == 401
        assert httpx.post(url + "/v1/votes", json=EVENT, headers=bearer(renewed)).status_code == 503
    finally:
        stop_serve(process)


def test_a_configured_token_wins_and_a_token_file_may_hold_several(tmp_path, capsys) -> None:
    generated = tmp_path / "generated"
    from_env = resolve_write_credential(None, {"UPVOTES_WRITE_TOKEN": f" {TOKEN}\n"}, generated)
    assert from_env.tokens == (TOKEN,) and from_env.generated_file is None and not generated.exists()
    token_file = tmp_path / "tokens"
    token_file.write_text(f"{OTHER_TOKEN}\n\n{TOKEN}\n")
    token_file.chmod(0o644)
    from_file = resolve_write_credential(token_file, {"UPVOTES_WRITE_TOKEN": "ignored-" * 3}, generated)
    assert from_file.tokens == (OTHER_TOKEN, TOKEN)
    assert "readable by other users" in capsys.readouterr().err
    with pytest.raises(CredentialError, match="cannot read"):
        resolve_write_credential(tmp_path / "missing", {}, generated)


def test_the_token_file_is_never_readable_by_others_whatever_the_umask(tmp_path) -> None:
    previous = os.umask(0)
    try:
        write_token_file(tmp_path / "state" / "token", TOKEN)
        write_token_file(tmp_path / "state" / "token", OTHER_TOKEN)  # replaced, not appended
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "state" / "token").stat().st_mode) == 0o600
    assert (tmp_path / "state" / "token").read_text() == OTHER_TOKEN + "\n"
    assert [p.name for p in (tmp_path / "state").iterdir()] == ["token"]  # no temporary file left


# --- the pure pieces --------------------------------------------------------------------------------


def test_token_buckets_refill_at_their_rate_up_to_their_burst() -> None:
    now = [100.0]
    buckets = TokenBuckets(rate=2.0, burst=4.0, clock=lambda: now[0], max_keys=3)
    assert [buckets.take("a") for _ in range(4)] == [0.0] * 4
    assert buckets.take("a") == pytest.approx(0.5)  # empty: one token in 1/rate s
    now[0] += 0.5
    assert buckets.take("a") == 0.0 and buckets.take("a") > 0
    assert buckets.take("b") == 0.0  # keys are independent
    now[0] += 100
    assert [buckets.take("a") for _ in range(5)][-1] > 0  # refilled to the burst, not beyond
    for key in ("c", "d", "e"):
        buckets.take(key)
    assert len(buckets._buckets) == 3  # the least recently used went first
    assert retry_after(0.01) == "1" and retry_after(19.2) == "20"


def test_sessions_are_signed_expire_and_bind_their_csrf_token() -> None:
    sessions = LiveSessions(TOKEN, lifetime_s=60)
    session, cookie = sessions.issue(now_s=1000.0)
    assert sessions.check(cookie, 1059.0) == session
    assert isinstance(sessions.check(cookie, 1060.0), SessionRefused)
    assert isinstance(sessions.check(cookie.replace(session.session_id, "x" * 22), 1001.0), SessionRefused)
    for garbage in ("", "a", "a.b.c", "..", "a.-1.c"):
        assert isinstance(sessions.check(garbage, 1001.0), SessionRefused)
    other, _ = sessions.issue(now_s=1000.0)
    assert sessions.csrf_matches(session, sessions.csrf_token(session))
    assert not sessions.csrf_matches(session, sessions.csrf_token(other))
    assert not sessions.csrf_matches(session, None)
    assert isinstance(LiveSessions(OTHER_TOKEN, 60).check(cookie, 1001.0), SessionRefused)
    assert sessions.check(cookie, 1001.0) == Session(session.session_id, 1060)


def test_header_rules() -> None:
    assert host_of("LocalHost:8080") == "localhost" and host_of("[::1]:80") == "[::1]"
    assert host_of("127.0.0.1") == "127.0.0.1"
    for bad in (None, "", "a b", "a/b", "x@y", "[::1", "h:port"):
        assert host_of(bad) is None
    assert origin_key("http://LOCALHOST") == ("http", "localhost", 80)
    assert origin_key("https://[::1]:8443") == ("https", "[::1]", 8443)
    assert origin_key("null") is None and origin_key("http://x:99999") is None
    for accepted in ("application/json", "Application/JSON; charset=utf-8", 'application/x-ndjson;charset="UTF-8"'):
        assert json_media_type(accepted)[1] is None, accepted
    for refused in (
        None,
        "",
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/json-patch+json",
        "application/json; charset=latin-1",
        "text/json",
    ):
        assert json_media_type(refused)[0] is None, refused
    assert allowed_hosts_for("0.0.0.0", ["Votes.Example.com"]) == (
        "localhost",
        "127.0.0.1",
        "[::1]",
        "votes.example.com",
    )
    assert allowed_hosts_for("::1") == ("localhost", "127.0.0.1", "[::1]")
    assert allowed_hosts_for("10.1.2.3")[-1] == "10.1.2.3"
    with pytest.raises(InvalidServeSetting, match="allowed-host"):
        ServiceSettings(write_tokens=(TOKEN,), allowed_hosts=("*.example.com",))


def test_the_docs_list_every_serve_flag_with_its_default() -> None:
    page = (REPO / "docs" / "reading.md").read_text(encoding="utf-8")
    assert readme_table(page) == flags_table_markdown(), "paste flags_table_markdown() between the serve-flags markers"
