"""Writes the malformed-message corpus: NNN-short-name.bin files and expected.json.

    python tests/corpus/make_corpus.py

Deterministic: the same bytes and the same manifest on every run (tests/test_bad_input.py
checks the files on disk still equal what this script makes). Every .bin entry is a raw Pub/Sub
message payload (contract v1, no `format` attribute) with the outcome
`schemas.contract.parse_vote` must give it: "accepted", or the rejection reason (one of
schemas.contract.REASONS). Every .ndjson entry is a batch (contract v2, sent with the
attribute format=ndjson) with its outcome: {"whole": reason} for a batch rejected whole, or
{"accepted": n, "rejected": {line number: reason}} for one read line by line.

The expectations are written down by hand from the event contract
(schemas/vote_event.schema.json) and the parser's documented behaviour, not recorded from
parse_vote, so the corpus can catch a regression. Notes on the less obvious ones:

- post_id is any string of 1-128 characters (code points), so SQL-looking, quoted,
  backslashed, control-character, RTL-override and emoji post IDs are *accepted*; the
  tests write them to Spanner and read them back verbatim.
- orjson refuses NaN/Infinity literals, numbers that overflow a double (1e400, even in an
  ignored field), lone surrogate escapes, a UTF-8 BOM, raw control characters inside
  strings, nesting deeper than 1024 and anything after the document: all `not_json`
  (the bytes are valid UTF-8, so the reason is not `not_utf8`).
- orjson reads integers beyond 64 bits as floats; the parser reports those by their size
  (`delta_out_of_range`), not their type.
- Duplicate keys: the last one wins (orjson, like Python's json). The corpus pins that down
  so a parser change that would make publishers and the pipeline disagree is noticed.
- A null or empty optional field (event_id, user_id, event_time) is `wrong_type`, as the JSON
  Schema says ("type": "string", "minLength": 1): absent is the only way to leave one out.
- An event_time whose UTC hour falls outside Spanner's TIMESTAMP range (years 1-9999) is a
  `bad_event_time`: the sink could not build the row's key.
- A vote-state event (a `vote` field) needs a user_id (`missing_user`) and an event_time
  (`missing_field`), a vote of up, down or none (`unknown_vote`), and carries no counter nor delta
  (`state_with_delta`).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = "expected.json"


def vote(**changes) -> dict:
    fields = {"post_id": "p-1", "counter": "upvotes", "delta": 1}
    fields.update(changes)
    return {k: v for k, v in fields.items() if v is not _DROP}


def vote_state(**changes) -> dict:
    """A vote-state event (one vote per user): a vote, a user and a time, no counter nor delta."""
    fields = {"post_id": "p-1", "user_id": "u-1", "vote": "up", "event_time": "2026-11-22T01:02:03.456Z"}
    fields.update(changes)
    return {k: v for k, v in fields.items() if v is not _DROP}


_DROP = object()


def js(value) -> bytes:
    """Compact UTF-8 JSON, non-ASCII characters as themselves (not \\u escapes)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def raw(template: str, **slots: bytes) -> bytes:
    """A payload assembled from literal bytes, for what json.dumps would never produce."""
    out = template.encode("ascii")
    for name, value in slots.items():
        out = out.replace(f"<{name}>".encode("ascii"), value)
    return out


VALID_PREFIX = b'{"counter":"upvotes","delta":1,"post_id":'


def with_post_id_bytes(post_id_json: bytes) -> bytes:
    """A valid vote whose post_id value is the given raw JSON bytes."""
    return VALID_PREFIX + post_id_json + b"}"


def entries() -> list[tuple[str, bytes, str]]:
    garbage = bytes([0xFF]) + bytes(random.Random(20261122).randrange(256) for _ in range(511))
    emoji = "\U0001f525"  # one code point, four UTF-8 bytes
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"  # 7 code points
    return [
        # --- not even text, or not one JSON document -------------------------------------
        ("binary-garbage", garbage, "not_utf8"),
        ("empty-payload", b"", "not_json"),
        ("whitespace-only", b" \t\r\n ", "not_json"),
        ("single-nul-byte", b"\x00", "not_json"),
        ("deep-nesting-100k-brackets", b"[" * 100_000, "too_large"),
        ("deep-nesting-60k-brackets", b"[" * 60_000, "not_json"),
        ("nested-arrays-depth-1024", b"[" * 1024 + b"]" * 1024, "not_object"),
        ("nested-arrays-depth-1025", b"[" * 1025 + b"]" * 1025, "not_json"),
        ("deep-nesting-inside-post-id", with_post_id_bytes(b"[" * 2000 + b"]" * 2000), "not_json"),
        ("trailing-garbage", js(vote()) + b" garbage", "not_json"),
        ("two-concatenated-documents", js(vote()) + js(vote()), "not_json"),
        ("nul-after-document", js(vote()) + b"\x00", "not_json"),
        ("trailing-newline", js(vote()) + b"\r\n", "accepted"),
        ("single-quoted-keys", b"{'post_id':'p-1','counter':'upvotes','delta':1}", "not_json"),
        ("unquoted-keys", b'{post_id:"p-1",counter:"upvotes",delta:1}', "not_json"),
        ("trailing-comma", b'{"post_id":"p-1","counter":"upvotes","delta":1,}', "not_json"),
        ("comment-in-json", b'{"post_id":"p-1", /* hi */ "counter":"upvotes","delta":1}', "not_json"),
        # --- JSON, but not an object ----------------------------------------------------
        ("array-of-events", js([vote(), vote(post_id="p-2")]), "not_object"),
        ("json-string-containing-json", js(json.dumps(vote())), "not_object"),
        ("top-level-null", b"null", "not_object"),
        ("top-level-true", b"true", "not_object"),
        ("top-level-number", b"42", "not_object"),
        # --- missing fields ---------------------------------------------------------------
        ("empty-object", b"{}", "missing_field"),
        ("field-names-in-other-case", js({"Post_ID": "p-1", "Counter": "upvotes", "Delta": 1}), "missing_field"),
        ("missing-delta", js(vote(delta=_DROP)), "missing_field"),
        # --- wrong types, field by field --------------------------------------------------
        ("post-id-integer", js(vote(post_id=42)), "wrong_type"),
        ("post-id-float", js(vote(post_id=4.2)), "wrong_type"),
        ("post-id-boolean", js(vote(post_id=True)), "wrong_type"),
        ("post-id-null", js(vote(post_id=None)), "wrong_type"),
        ("post-id-array", js(vote(post_id=["p-1"])), "wrong_type"),
        ("post-id-object", js(vote(post_id={"id": "p-1"})), "wrong_type"),
        ("counter-integer", js(vote(counter=1)), "wrong_type"),
        ("counter-null", js(vote(counter=None)), "wrong_type"),
        ("counter-array", js(vote(counter=["upvotes"])), "wrong_type"),
        ("counter-boolean", js(vote(counter=False)), "wrong_type"),
        ("delta-string", js(vote(delta="1")), "wrong_type"),
        ("delta-float", js(vote(delta=1.5)), "wrong_type"),
        ("delta-float-one", raw('{"post_id":"p-1","counter":"upvotes","delta":1.0}'), "wrong_type"),
        ("delta-exponent-1e2", raw('{"post_id":"p-1","counter":"upvotes","delta":1E2}'), "wrong_type"),
        ("delta-minus-zero-float", raw('{"post_id":"p-1","counter":"upvotes","delta":-0.0}'), "wrong_type"),
        ("delta-true", js(vote(delta=True)), "wrong_type"),
        ("delta-false", js(vote(delta=False)), "wrong_type"),
        ("delta-null", js(vote(delta=None)), "wrong_type"),
        ("delta-array", js(vote(delta=[1])), "wrong_type"),
        ("delta-object", js(vote(delta={"value": 1})), "wrong_type"),
        ("event-id-integer", js(vote(event_id=7)), "wrong_type"),
        ("user-id-array", js(vote(user_id=["u-1"])), "wrong_type"),
        ("event-time-integer", js(vote(event_time=1795309323)), "wrong_type"),
        # --- numbers at and beyond the edges ----------------------------------------------
        ("delta-nan", raw('{"post_id":"p-1","counter":"upvotes","delta":NaN}'), "not_json"),
        ("delta-infinity", raw('{"post_id":"p-1","counter":"upvotes","delta":Infinity}'), "not_json"),
        ("delta-minus-infinity", raw('{"post_id":"p-1","counter":"upvotes","delta":-Infinity}'), "not_json"),
        ("delta-1e400", raw('{"post_id":"p-1","counter":"upvotes","delta":1e400}'), "not_json"),
        ("ignored-field-1e400", raw('{"post_id":"p-1","counter":"upvotes","delta":1,"x":1e400}'), "not_json"),
        ("delta-float-1e7", raw('{"post_id":"p-1","counter":"upvotes","delta":1e7}'), "delta_out_of_range"),
        ("delta-huge-integer", js(vote(delta=10**30)), "delta_out_of_range"),
        ("delta-2-pow-64", js(vote(delta=2**64)), "delta_out_of_range"),
        ("delta-2-pow-63", js(vote(delta=2**63)), "delta_out_of_range"),
        ("delta-minus-2-pow-63-minus-1", js(vote(delta=-(2**63) - 1)), "delta_out_of_range"),
        ("delta-1000001", js(vote(delta=1_000_001)), "delta_out_of_range"),
        ("delta-minus-1000001", js(vote(delta=-1_000_001)), "delta_out_of_range"),
        ("delta-1000000", js(vote(delta=1_000_000)), "accepted"),
        ("delta-minus-1000000", js(vote(delta=-1_000_000)), "accepted"),
        ("delta-minus-zero", raw('{"post_id":"p-1","counter":"upvotes","delta":-0}'), "zero_delta"),
        ("delta-zero", js(vote(delta=0)), "zero_delta"),
        # --- counters -----------------------------------------------------------------------
        ("counter-uppercase", js(vote(counter="UPVOTES")), "unknown_counter"),
        ("counter-trailing-space", js(vote(counter="upvotes ")), "unknown_counter"),
        ("counter-with-nul", js(vote(counter="upvotes\u0000")), "unknown_counter"),
        ("counter-sql", js(vote(counter="upvotes' OR '1'='1")), "unknown_counter"),
        # --- post_id lengths ----------------------------------------------------------------
        ("post-id-empty", js(vote(post_id="")), "empty_post_id"),
        ("post-id-128-ascii", js(vote(post_id="x" * 128)), "accepted"),
        ("post-id-129-ascii", js(vote(post_id="x" * 129)), "post_id_too_long"),
        ("post-id-128-emoji", js(vote(post_id=emoji * 128)), "accepted"),
        ("post-id-129-emoji", js(vote(post_id=emoji * 129)), "post_id_too_long"),
        ("post-id-128-combining-marks", js(vote(post_id="e\u0301" * 64)), "accepted"),
        ("post-id-zwj-family-emoji", js(vote(post_id=family)), "accepted"),
        ("post-id-single-space", js(vote(post_id=" ")), "accepted"),
        # --- unicode edge cases ---------------------------------------------------------------
        ("lone-high-surrogate-escape", with_post_id_bytes(b'"\\ud800"'), "not_json"),
        ("lone-low-surrogate-escape", with_post_id_bytes(b'"\\udc00"'), "not_json"),
        ("reversed-surrogate-pair-escape", with_post_id_bytes(b'"\\udc00\\ud800"'), "not_json"),
        ("raw-surrogate-bytes-cesu8", with_post_id_bytes(b'"\xed\xa0\x80"'), "not_utf8"),
        ("utf8-bom-prefix", b"\xef\xbb\xbf" + js(vote()), "not_json"),
        ("utf16le-with-bom", b"\xff\xfe" + json.dumps(vote()).encode("utf-16-le"), "not_utf8"),
        ("overlong-utf8-slash", with_post_id_bytes(b'"p\xc0\xaf1"'), "not_utf8"),
        ("overlong-utf8-nul", with_post_id_bytes(b'"p\xc0\x801"'), "not_utf8"),
        ("truncated-utf8-sequence", with_post_id_bytes(b'"p\xe2\x82"'), "not_utf8"),
        ("latin1-e-acute", with_post_id_bytes(b'"caf\xe9"'), "not_utf8"),
        ("raw-nul-inside-string", with_post_id_bytes(b'"p\x001"'), "not_json"),
        ("raw-control-char-inside-string", with_post_id_bytes(b'"p\x071"'), "not_json"),
        ("escaped-nul-post-id", with_post_id_bytes(b'"\\u0000"'), "accepted"),
        ("rtl-override-post-id", js(vote(post_id="\u202egnp.exe")), "accepted"),
        ("rtl-and-lrm-marks-post-id", js(vote(post_id="\u200f\u05e9\u05dc\u05d5\u05dd\u200e-1")), "accepted"),
        ("bom-inside-post-id", js(vote(post_id="\ufeffp-1")), "accepted"),
        # --- hostile but valid post IDs: stored and read back verbatim ------------------------
        ("sql-drop-table-post-id", js(vote(post_id="'; DROP TABLE Posts; --")), "accepted"),
        ("sql-or-1-equals-1-post-id", js(vote(post_id='" OR "1"="1')), "accepted"),
        ("sql-union-select-post-id", js(vote(post_id="p-1' UNION SELECT PostId FROM Posts --")), "accepted"),
        ("sql-parameter-lookalike-post-id", js(vote(post_id="@post_ids")), "accepted"),
        ("backslashes-and-quotes-post-id", js(vote(post_id="\\'\\\"\\\\`")), "accepted"),
        ("control-chars-post-id", js(vote(post_id="\u0001\u0007\u001b[31m\u007f")), "accepted"),
        ("crlf-tab-post-id", js(vote(post_id="a\r\nb\tc")), "accepted"),
        ("format-string-post-id", js(vote(post_id="%s%n{0}${jndi:ldap://x/a}")), "accepted"),
        ("html-script-post-id", js(vote(post_id="<script>alert(1)</script>")), "accepted"),
        ("path-traversal-post-id", js(vote(post_id="../../etc/passwd")), "accepted"),
        ("number-like-post-id", js(vote(post_id="1e400")), "accepted"),
        # --- duplicate keys: the last one wins --------------------------------------------------
        (
            "duplicate-delta-last-is-zero",
            raw('{"post_id":"p-1","counter":"upvotes","delta":1,"delta":0}'),
            "zero_delta",
        ),
        ("duplicate-delta-last-is-valid", raw('{"post_id":"p-1","counter":"upvotes","delta":0,"delta":1}'), "accepted"),
        (
            "duplicate-counter-last-unknown",
            raw('{"post_id":"p-1","counter":"upvotes","delta":1,"counter":"likes"}'),
            "unknown_counter",
        ),
        # --- optional fields ----------------------------------------------------------------------
        ("event-id-129-chars", js(vote(event_id="e" * 129)), "field_too_long"),
        ("user-id-129-chars", js(vote(user_id="u" * 129)), "field_too_long"),
        ("user-id-null", js(vote(user_id=None)), "wrong_type"),
        ("event-time-null", js(vote(event_time=None)), "wrong_type"),
        ("event-time-no-offset", js(vote(event_time="2026-11-22T01:02:03")), "bad_event_time"),
        ("event-time-month-13", js(vote(event_time="2026-13-01T00:00:00Z")), "bad_event_time"),
        ("event-time-empty", js(vote(event_time="")), "bad_event_time"),
        ("event-time-words", js(vote(event_time="yesterday'; DROP TABLE Posts; --")), "bad_event_time"),
        ("event-time-nanoseconds", js(vote(event_time="2026-11-22T01:02:03.123456789Z")), "accepted"),
        ("event-time-year-0-in-utc", js(vote(event_time="0001-01-01T00:00:00+14:00")), "bad_event_time"),
        ("event-time-year-10000-in-utc", js(vote(event_time="9999-12-31T23:59:59-14:00")), "bad_event_time"),
        (
            "unknown-fields-ignored",
            js(vote(extra={"nested": [1, {"deep": None}]}, __proto__={"admin": True})),
            "accepted",
        ),
        # --- vote-state events: one vote per user -------------------------------------------------
        ("vote-state-up", js(vote_state()), "accepted"),
        ("vote-state-down-with-event-id", js(vote_state(vote="down", event_id="e-1")), "accepted"),
        (
            "vote-state-none-nanoseconds",
            js(vote_state(vote="none", event_time="2026-11-22T01:02:03.123456789Z")),
            "accepted",
        ),
        ("vote-state-hostile-user-id", js(vote_state(user_id="'; DROP TABLE Votes; --")), "accepted"),
        ("vote-state-missing-user", js(vote_state(user_id=_DROP)), "missing_user"),
        ("vote-state-user-null", js(vote_state(user_id=None)), "wrong_type"),
        ("vote-state-user-129-chars", js(vote_state(user_id="u" * 129)), "field_too_long"),
        ("vote-state-unknown-vote", js(vote_state(vote="sideways")), "unknown_vote"),
        ("vote-state-vote-uppercase", js(vote_state(vote="UP")), "unknown_vote"),
        ("vote-state-vote-integer", js(vote_state(vote=1)), "wrong_type"),
        ("vote-state-vote-null", js(vote_state(vote=None)), "wrong_type"),
        ("vote-state-missing-time", js(vote_state(event_time=_DROP)), "missing_field"),
        ("vote-state-bad-time", js(vote_state(event_time="now")), "bad_event_time"),
        ("vote-state-missing-post", js(vote_state(post_id=_DROP)), "missing_field"),
        ("vote-state-with-counter", js(vote_state(counter="upvotes")), "state_with_delta"),
        ("vote-state-with-delta", js(vote_state(delta=-1)), "state_with_delta"),
        (
            "duplicate-vote-last-is-unknown",
            raw('{"post_id":"p-1","user_id":"u-1","vote":"up","event_time":"2026-11-22T01:02:03Z","vote":"meh"}'),
            "unknown_vote",
        ),
    ]


def batch_entries() -> list[tuple[str, bytes, dict]]:
    """(name, ndjson payload, expected outcome) of each batch. The limits: 1,000 events, 1 MB."""
    good = js(vote())
    one_bad = [good] * 1000
    one_bad[636] = js(vote(delta="1"))
    line_too_big = js(vote(pad="x" * 70_000))  # over the 64 KiB limit of one event
    return [
        (
            "batch-one-bad-line-among-1000",
            b"\n".join(one_bad) + b"\n",
            {"accepted": 999, "rejected": {"637": "wrong_type"}},
        ),
        (
            "batch-all-lines-bad",
            b"\n".join([b"nope", js([vote()]), js(vote(counter="likes")), js(vote(delta=0))]),
            {
                "accepted": 0,
                "rejected": {"1": "not_json", "2": "not_object", "3": "unknown_counter", "4": "zero_delta"},
            },
        ),
        (
            "batch-blank-lines-and-crlf",
            b"\n\n" + good + b"\r\n   \n\t\n" + js(vote(counter="shares")) + b"\n\n",
            {"accepted": 2, "rejected": {}},
        ),
        ("batch-only-blank-lines", b"\n \n\n", {"accepted": 0, "rejected": {}}),
        (
            "batch-a-line-over-the-event-limit",
            b"\n".join([good, line_too_big, good]),
            {"accepted": 2, "rejected": {"2": "too_large"}},
        ),
        ("batch-1001-events", b"\n".join([good] * 1001), {"whole": "too_many_events"}),
        ("batch-not-utf8", b"\n".join([good, b"\xff\xfe", good]), {"whole": "not_utf8"}),
        ("batch-bad-format-value", b"\n".join([good, good]), {"whole": "unknown_format"}),
        ("batch-json-array-is-one-bad-line", js([vote(), vote()]), {"accepted": 0, "rejected": {"1": "not_object"}}),
        (
            "batch-vote-states-among-deltas",
            b"\n".join([good, js(vote_state()), js(vote_state(vote="none")), js(vote_state(user_id=_DROP)), good]),
            {"accepted": 4, "rejected": {"4": "missing_user"}},
        ),
    ]


# The `format` attribute each batch entry is sent with.
BATCH_FORMATS = {"batch-bad-format-value": "json-seq"}


def format_of(file_name: str) -> str:
    """The `format` attribute of a .ndjson corpus file's message."""
    stem = file_name.split("-", 1)[1].rsplit(".", 1)[0]
    return BATCH_FORMATS.get(stem, "ndjson")


def file_name(index: int, name: str, suffix: str = ".bin") -> str:
    return f"{index:03d}-{name}{suffix}"


def corpus() -> dict[str, tuple[bytes, str | dict]]:
    """{file name: (payload, expected outcome)}, in order."""
    items: list[tuple[str, bytes, str | dict, str]] = [
        (name, data, expected, ".bin") for name, data, expected in entries()
    ]
    items += [(name, data, expected, ".ndjson") for name, data, expected in batch_entries()]
    names = [name for name, *_ in items]
    if len(set(names)) != len(names):
        raise ValueError("duplicate corpus entry names")
    return {file_name(i, name, suffix): (data, expected) for i, (name, data, expected, suffix) in enumerate(items, 1)}


def write(directory: Path = HERE) -> int:
    """Rewrites the corpus files and manifest in `directory`; returns how many files."""
    files = corpus()
    for stale in [*directory.glob("*.bin"), *directory.glob("*.ndjson")]:
        if stale.name not in files:
            stale.unlink()
    for name, (data, _) in files.items():
        (directory / name).write_bytes(data)
    manifest = {name: expected for name, (_, expected) in files.items()}
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=1, ensure_ascii=True) + "\n", encoding="utf-8")
    return len(files)


if __name__ == "__main__":
    print(f"wrote {write()} corpus files and {MANIFEST} to {HERE}")
