"""`upvotes serve` over real HTTP: uvicorn on a free loopback port, httpx as the client, the
Spanner and Pub/Sub emulators behind it. Every route, the write token, body limits, hostile
post IDs, a user's vote (as applied to the Votes table), error bodies and a slow-loris
client. The hostile requests (foreign hosts and origins, cross-site forms, stolen sessions,
a session reading or voting as another user, bursts) are in tests/test_serve_security.py."""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import quote

import httpx
import orjson
import pytest
from google.cloud import pubsub_v1

from schemas.contract import (
    BATCH_ID_PREFIX,
    EVENT_ID_ATTRIBUTE,
    EVENT_TIME_ATTRIBUTE,
    MESSAGE_ID_PREFIX,
    batch_messages,
    event_message,
    parse_vote,
)
from schemas.counters import Counts
from schemas.records import PostDelta, PostUser, VoteEvent, VoteState
from schemas.vote_states import LatestVote, keep_latest
from schemas.voter_sketch import sketch_of
from spanner_reads.counts_reader import CountsReader
from spanner_writes.deltas import write_deltas
from spanner_writes.votes import apply_all_vote_states
from upvotes.cli import main
from upvotes.serving.service import (
    MAX_BODY_BYTES,
    MAX_EVENTS,
    PubSubVotePublisher,
    ServiceSettings,
    create_app,
    start_in_background,
)
from upvotes.serving.user_votes import SpannerVoteReader

HOUR = 1_795_312_800
TOKEN = "correct horse battery staple"
TIMEOUT_S = 1.0
HOSTILE_IDS = [
    "a/b/c",
    "with space",
    "ünïcødé/☃",
    "../../etc/passwd",
    "%2F%20",
    "?q=1&id=2#frag",
    "<script>alert(1)</script>",
    "'; DROP TABLE Posts; --",
    "tab\there",
    "x" * 128,
]


@pytest.fixture(scope="module")
def service(stack, database):
    settings = ServiceSettings(write_tokens=(TOKEN,), head_timeout_s=TIMEOUT_S, body_timeout_s=TIMEOUT_S)
    app = create_app(
        CountsReader(database, refresh_s=0.0),
        SpannerVoteReader(database),
        PubSubVotePublisher(stack.topic_path(stack.topic)),
        settings,
    )
    running = start_in_background(app, settings)
    yield running
    running.stop()


@pytest.fixture
def client(service):  # a new one per test: no session cookie carried from one test to the next
    with httpx.Client(base_url=service.url, timeout=30) as http:
        yield http


def auth(token: str = TOKEN) -> dict:
    return {"Authorization": f"Bearer {token}"}


NDJSON = {"Content-Type": "application/x-ndjson"}


def pull(stack, want: int, timeout_s: float = 30) -> list:
    subscriber = pubsub_v1.SubscriberClient()
    messages: list = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(messages) < want and time.monotonic() < deadline:
            response = subscriber.pull(
                subscription=stack.subscription_path(stack.subscription), max_messages=100, timeout=5
            )
            messages += [m.message for m in response.received_messages]
            if response.received_messages:
                subscriber.acknowledge(
                    subscription=stack.subscription_path(stack.subscription),
                    ack_ids=[m.ack_id for m in response.received_messages],
                )
    finally:
        subscriber.close()
    return messages


def test_health_docs_and_the_live_page(client) -> None:
    assert client.get("/healthz").json()["status"] == "ok"
    assert "swagger" in client.get("/docs").text.lower()
    paths = client.get("/openapi.json").json()["paths"]
    assert {
        "/v1/posts/{post_id}",
        "/v1/posts/{post_id}/votes/{user_id}",
        "/v1/posts",
        "/v1/top",
        "/v1/votes",
        "/healthz",
    } <= set(paths)
    page = client.get("/")
    assert page.status_code == 200 and '<script src="/live-page.js"' in page.text
    script = client.get("/live-page.js")
    assert script.headers["content-type"].startswith("text/javascript") and "/v1/top" in script.text
    assert "textContent" in script.text and "innerHTML" not in script.text
    assert client.get("/live-page.css").headers["content-type"].startswith("text/css")


def test_posts_with_hostile_ids_read_exactly_in_paths_and_queries(client, database) -> None:
    write_deltas(
        database,
        [PostDelta.of(p, HOUR, f"h:{i}", upvotes=10 + i, shares=i, events=1) for i, p in enumerate(HOSTILE_IDS)],
    )
    for i, post_id in enumerate(HOSTILE_IDS):
        one = client.get(f"/v1/posts/{quote(post_id, safe='')}")
        assert one.status_code == 200, (post_id, one.text)
        body = one.json()
        assert (body["post_id"], body["upvotes"], body["shares"]) == (post_id, 10 + i, i)
        assert body["as_of"].startswith("20")
    many = client.get("/v1/posts", params=[("id", p) for p in HOSTILE_IDS + ["never-voted"]]).json()["posts"]
    assert [(p["post_id"], p["upvotes"]) for p in many] == [(p, 10 + i) for i, p in enumerate(HOSTILE_IDS)] + [
        ("never-voted", 0)
    ]


def test_unique_voters_are_read_on_request_only(client, database) -> None:
    post = "voted/by ü"
    write_deltas(
        database,
        [
            PostDelta.of(post, HOUR, "uv:1", upvotes=4, events=4, voters=sketch_of(["a", "b", "c"])),
            PostDelta.of(post, HOUR + 3600, "uv:2", upvotes=2, events=2, voters=sketch_of(["c", "d"])),
        ],
    )
    plain = client.get(f"/v1/posts/{quote(post, safe='')}").json()
    assert plain["upvotes"] == 6 and "unique_voters" not in plain
    one = client.get(f"/v1/posts/{quote(post, safe='')}", params={"unique": "true"}).json()
    assert (one["upvotes"], one["unique_voters"]) == (6, 4)
    many = client.get("/v1/posts", params=[("id", post), ("id", "never-voted"), ("unique", "true")]).json()["posts"]
    assert [(p["post_id"], p["unique_voters"]) for p in many] == [(post, 4), ("never-voted", 0)]


def test_bad_reads_answer_json_reasons(client) -> None:
    for path, status in [
        ("/v1/posts/" + "y" * 129, 400),
        ("/v1/posts/", 400),
        ("/v1/posts", 400),
        ("/v1/top?n=0", 400),
        ("/v1/top?n=lots", 400),
        ("/nowhere", 404),
    ]:
        response = client.get(path)
        assert response.status_code == status, path
        assert response.headers["content-type"] == "application/json"
        assert response.json()["error"] and "Traceback" not in response.text


def apply_states(database, *events: dict) -> None:
    """Vote-state events applied to the Votes table through the stream's own path (the latest of
    each user's events on each post)."""
    states: dict[PostUser, LatestVote] = {}
    for event in events:
        state = parse_vote(json.dumps(event).encode(), None, time.time())
        assert isinstance(state, VoteState), state
        keep_latest(states, PostUser(state.post_id, state.user_id), state.latest())
    apply_all_vote_states(database, states)


def vote_path(post_id: str, user_id: str) -> str:
    return f"/v1/posts/{quote(post_id, safe='')}/votes/{quote(user_id, safe='')}"


def test_a_users_vote_reads_as_applied_and_never_voted_reads_none(client, database) -> None:
    user = "reader/ü 1"
    up = {"post_id": "mv/1", "user_id": user, "vote": "up", "event_time": "2026-11-22T10:00:00Z", "event_id": "e-up"}
    flipped_down = {"vote": "down", "event_time": "2026-11-22T10:00:01.5Z", "event_id": "e-3"}
    apply_states(
        database, up, up | {"post_id": "mv/votes/2", "event_id": "e-2"}, up | {"post_id": "mv/votes/2"} | flipped_down
    )
    first = client.get(vote_path("mv/1", user), headers=auth())
    assert first.status_code == 200
    assert first.json()["applied_at"].startswith("20")
    assert first.json() | {"applied_at": None} == {
        "post_id": "mv/1",
        "user_id": user,
        "vote": "up",
        "voted_at": "2026-11-22T10:00:00+00:00",
        "event_id": "e-up",
        "applied_at": None,
    }
    # A post ID holding "/votes/": the path splits at its last "/votes/", so its vote reads right...
    flipped = client.get(vote_path("mv/votes/2", user), headers=auth()).json()
    assert (flipped["post_id"], flipped["user_id"], flipped["vote"], flipped["event_id"]) == (
        "mv/votes/2",
        user,
        "down",
        "e-3",
    )
    assert flipped["voted_at"] == "2026-11-22T10:00:01.500000+00:00"
    # ...and its counts are read with ?id= (in the path, they would be read as a user's vote).
    counts = client.get("/v1/posts", params={"id": "mv/votes/2"}).json()["posts"][0]
    assert (counts["upvotes"], counts["downvotes"]) == (0, 1)
    assert client.get(f"/v1/posts/{quote('mv/votes/2', safe='')}").status_code == 401
    never = client.get(vote_path("mv/1", "someone else"), headers=auth())
    assert never.status_code == 200
    assert never.json() == {
        "post_id": "mv/1",
        "user_id": "someone else",
        "vote": "none",
        "voted_at": None,
        "event_id": None,
        "applied_at": None,
    }


def test_a_users_vote_needs_ids_within_the_contracts_limits(client) -> None:
    for path, reason in [
        (vote_path("p" * 129, "u"), "post_id has 129 characters"),
        (vote_path("p", "u" * 129), "user_id has 129 characters"),
        ("/v1/posts/p/votes/", "user_id is empty"),
        ("/v1/posts//votes/u", "post_id is empty"),
    ]:
        response = client.get(path, headers=auth())
        assert response.status_code == 400, path
        assert reason in response.json()["error"], path
    assert client.get(vote_path("p" * 128, "u" * 128), headers=auth()).json()["vote"] == "none"


def test_top_ranks_by_exact_counts(client, database) -> None:
    write_deltas(database, [PostDelta.of("top-riser", HOUR, "t:1", upvotes=10_000, shares=3, events=1)])
    top = client.get("/v1/top", params={"n": 3}).json()
    assert top["posts"][0] == {"post_id": "top-riser", **Counts(upvotes=10_000, shares=3)._asdict()}
    assert top["exact"] is True and top["as_of"].startswith("20")


def test_writes_need_the_token(client) -> None:
    event = {"post_id": "w", "counter": "upvotes", "delta": 1}
    missing = client.post("/v1/votes", json=event)
    wrong = client.post("/v1/votes", json=event, headers=auth("correct horse battery stapler"))
    not_bearer = client.post("/v1/votes", json=event, headers={"Authorization": f"Basic {TOKEN}"})
    for response in (missing, wrong, not_bearer):
        assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
        assert "token" in response.json()["error"]


def test_votes_are_validated_with_the_pipeline_parser_and_published(client, stack) -> None:
    single = client.post(
        "/v1/votes", json={"post_id": "a/b c", "counter": "upvotes", "delta": 1, "event_id": "e-1"}, headers=auth()
    )
    assert (single.status_code, single.json()) == (202, {"accepted": 1, "rejected": []})
    lines = [
        json.dumps({"post_id": "n-1", "counter": "upvotes", "delta": 1}),
        json.dumps({"post_id": "n-2", "counter": "shares", "delta": 2}),
        json.dumps({"post_id": "n-3", "counter": "upvotes", "delta": 0}),
        "not json",
        "",
        json.dumps({"post_id": "ünï", "counter": "upvotes", "delta": -1}),
    ]
    batch = client.post("/v1/votes", content="\n".join(lines).encode(), headers={**auth(), **NDJSON})
    assert batch.status_code == 202
    assert batch.json()["accepted"] == 3
    assert [(r["line"], r["error"].split(":")[0]) for r in batch.json()["rejected"]] == [
        (3, "zero_delta"),
        (4, "not_json"),
    ]

    messages = pull(stack, want=2)
    assert len(messages) == 2
    by_format = {m.attributes.get("format", "v1"): m for m in messages}
    v1 = by_format["v1"]
    assert v1.attributes["event_id"] == "e-1" and orjson.loads(v1.data)["post_id"] == "a/b c"
    ndjson = by_format["ndjson"]
    assert ndjson.attributes["event_id"]
    events = [parse_vote(line, {}, time.time()) for line in ndjson.data.split(b"\n")]
    deltas = [e for e in events if isinstance(e, VoteEvent)]
    assert deltas == events
    assert [(e.post_id, e.counter, e.delta) for e in deltas] == [
        ("n-1", "upvotes", 1),
        ("n-2", "shares", 2),
        ("ünï", "upvotes", -1),
    ]


def test_the_service_publishes_what_upvotes_publish_publishes(client, stack) -> None:
    """The write route and `upvotes publish` encode events alike (schemas.contract, the one owner):
    a v1 message carries the event's event_id and event_time attributes (a new message ID for an
    event without one), a batch format=ndjson and a batch-<uuid4> ID, on the emulator topic."""
    delta = {
        "post_id": "same-1",
        "counter": "upvotes",
        "delta": 1,
        "event_id": "e-same-1",
        "event_time": "2026-11-22T01:02:03.456Z",
        "user_id": "u-1",
    }
    state = {"post_id": "same-2", "user_id": "u-2", "vote": "up", "event_time": "2026-11-22T01:02:04Z"}
    batch = [
        {
            "post_id": "same-3",
            "counter": "shares",
            "delta": 1,
            "event_id": f"e-b-{i}",
            "event_time": "2026-11-22T01:02:05Z",
        }
        for i in range(3)
    ]
    for event in (delta, state):
        assert client.post("/v1/votes", json=event, headers=auth()).status_code == 202
    body = b"\n".join(orjson.dumps(event) for event in batch)
    assert client.post("/v1/votes", content=body, headers={**auth(), **NDJSON}).status_code == 202

    served = {orjson.loads(m.data.split(b"\n")[0])["post_id"]: m for m in pull(stack, want=3)}
    assert sorted(served) == ["same-1", "same-2", "same-3"]
    published: dict[object, tuple] = {event["post_id"]: event_message(event) for event in (delta, state)}
    (published["same-3"],) = batch_messages(batch, len(batch))  # as `upvotes publish --batch-size 3`
    assert (served["same-1"].data, dict(served["same-1"].attributes)) == published["same-1"]
    assert dict(served["same-1"].attributes) == {"event_id": "e-same-1", "event_time": "2026-11-22T01:02:03.456Z"}
    for post_id in ("same-2", "same-3"):  # a new ID each: same attributes, same ID scheme
        message, attributes = served[post_id], dict(published[post_id][1])
        assert message.data == published[post_id][0] and message.attributes.keys() == attributes.keys()
        prefix = MESSAGE_ID_PREFIX if post_id == "same-2" else BATCH_ID_PREFIX
        assert message.attributes[EVENT_ID_ATTRIBUTE].startswith(prefix) and attributes[EVENT_ID_ATTRIBUTE].startswith(
            prefix
        )
        assert {k: v for k, v in message.attributes.items() if k != EVENT_ID_ATTRIBUTE} == {
            k: v for k, v in attributes.items() if k != EVENT_ID_ATTRIBUTE
        }
    assert served["same-2"].attributes[EVENT_TIME_ATTRIBUTE] == state["event_time"]


def test_nothing_valid_is_400_and_oversize_bodies_are_413(client) -> None:
    invalid = client.post("/v1/votes", content=b'{"post_id": ""}\n[1]\n', headers={**auth(), **NDJSON})
    assert invalid.status_code == 400 and invalid.json()["accepted"] == 0
    assert [r["line"] for r in invalid.json()["rejected"]] == [1, 2]
    too_big = client.post("/v1/votes", content=b"x" * (MAX_BODY_BYTES + 1), headers={**auth(), **NDJSON})
    assert too_big.status_code == 413 and "bytes" in too_big.json()["error"]
    event = json.dumps({"post_id": "many", "counter": "upvotes", "delta": 1}).encode()
    too_many = client.post("/v1/votes", content=b"\n".join([event] * (MAX_EVENTS + 1)), headers={**auth(), **NDJSON})
    assert too_many.status_code == 413 and "events" in too_many.json()["error"]


def test_cors_is_off_unless_configured(client) -> None:
    origin = {"Origin": "https://evil.example"}
    preflight = client.options("/v1/votes", headers={**origin, "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in preflight.headers
    assert "access-control-allow-origin" not in client.get("/healthz", headers=origin).headers


def test_a_slow_loris_is_cut_off_by_the_head_timeout(service) -> None:
    host, port = service.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        started = time.monotonic()
        closed_after = None
        while time.monotonic() - started < 10 * TIMEOUT_S:
            try:
                sock.sendall(b"X")  # one header byte at a time: uvicorn alone would wait forever
                sock.settimeout(0.2)
                if sock.recv(1024) == b"":
                    closed_after = time.monotonic() - started
                    break
            except TimeoutError:
                continue
            except OSError:
                closed_after = time.monotonic() - started
                break
    assert closed_after is not None and closed_after < 3 * TIMEOUT_S


def test_a_body_that_never_finishes_gets_408(service) -> None:
    host, port = service.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            f"POST /v1/votes HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
            'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"post_id"'.encode()
        )
        started = time.monotonic()
        reply = sock.recv(4096)
        assert time.monotonic() - started < 5 * TIMEOUT_S
        head, _, body = reply.partition(b"\r\n\r\n")
        length = int(
            next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
        )
        while len(body) < length:
            body += sock.recv(4096)
    assert head.startswith(b"HTTP/1.1 408") and "within" in json.loads(body)["error"]


def test_serve_refuses_an_empty_or_weak_token(stack, monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.delenv("UPVOTES_WRITE_TOKEN", raising=False)
    flags = ["serve", f"--project={stack.project}", f"--instance={stack.instance}", f"--database={stack.database}"]
    token_file = tmp_path / "token"
    token_file.write_text("\n")
    assert main([*flags, "--token-file", str(token_file)]) == 2
    assert "is empty" in capsys.readouterr().err
    token_file.write_text("hunter2\n")
    assert main([*flags, "--token-file", str(token_file)]) == 2
    assert "at least 16 characters" in capsys.readouterr().err
    token_file.write_text(TOKEN)
    assert main([*flags, "--token-file", str(token_file), "--cors-origin", "*"]) == 2
    assert "not an exact origin" in capsys.readouterr().err
