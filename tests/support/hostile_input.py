"""Hostile input, generated: hypothesis strategies of JSON values, of vote events mixing valid and
invalid fields, and of batch lines; and user IDs that try to break whatever stores or prints them.

MIXED_VOTE's events are valid about five times in six (`mostly`), so whole valid votes are
common too; their times are VALID_TIMES or INVALID_TIMES. tests/test_bad_input.py holds
parse_vote and parse_message to them, tests/test_parse_and_sum.py holds sum_message to
parse_message on NDJSON_LINES, and the voter tests count HOSTILE_IDS.
"""

from __future__ import annotations

import json

from hypothesis import strategies as st

from schemas.counters import CONTRACT_NAMES as COUNTERS
from schemas.vote_states import VOTES

HOSTILE_IDS = ["'; DROP TABLE Posts; --", "ü", "\u0000", "x" * 128, "a/b?c=d#e", " ", "🙂", "u-1", "U-1", "u-1 "]

# Any JSON value (and the non-JSON floats NaN and Infinity, which json.dumps writes anyway).
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
    | st.sampled_from(["post_id", "counter", "delta", "upvotes", "shares", ""])
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(
            st.text(max_size=12) | st.sampled_from(["post_id", "counter", "delta", "event_time"]), children, max_size=6
        )
    ),
    max_leaves=40,
)


NO_SURROGATES = st.characters(blacklist_categories=["Cs"])
TEXT = st.text(NO_SURROGATES, max_size=200)
VALID_TIMES = ["2026-11-22T01:02:03Z", "2026-11-22T03:02:03.5+02:00", "2026-11-22T01:59:59.999999-00:30"]
INVALID_TIMES = ["yesterday", "2026-11-22T01:02:03", "", "2026-02-30T00:00:00Z", "2026-11-22T24:00:01Z"]


def mostly(valid: st.SearchStrategy, *invalid: st.SearchStrategy) -> st.SearchStrategy:
    """Valid about five times in six, so that whole valid votes are common too."""
    return st.sampled_from([True] * 5 + [False]).flatmap(lambda ok: valid if ok else st.one_of(*invalid))


# A delta event's fields, each mostly valid; sometimes a required field dropped.
REQUIRED = ("post_id", "counter", "delta")
MIXED_VOTE = st.builds(
    lambda fields, optional, dropped: {k: v for k, v in {**fields, **optional}.items() if k not in dropped},
    st.fixed_dictionaries(
        {
            "post_id": mostly(
                st.text(NO_SURROGATES, min_size=1, max_size=128),
                st.just(""),
                st.text(NO_SURROGATES, min_size=129, max_size=140),
                st.integers(),
                st.none(),
                st.booleans(),
            ),
            "counter": mostly(st.sampled_from(COUNTERS), TEXT, st.integers(), st.none()),
            "delta": mostly(
                st.integers(-1_000_000, 1_000_000).filter(bool),
                st.just(0),
                st.integers(),
                st.integers(-(2**80), 2**80),
                st.floats(),
                st.booleans(),
                st.none(),
                TEXT,
            ),
        }
    ),
    st.fixed_dictionaries(
        {},
        optional={
            "event_id": mostly(st.text(NO_SURROGATES, max_size=128), TEXT, st.integers(), st.none()),
            "user_id": mostly(
                st.text(NO_SURROGATES, max_size=128), TEXT, st.lists(st.integers(), max_size=2), st.none()
            ),
            "event_time": mostly(
                st.sampled_from(VALID_TIMES) | st.none(), st.sampled_from(INVALID_TIMES), st.integers()
            ),
            "vote": mostly(st.sampled_from(VOTES), TEXT, st.integers(), st.none()),
            "extra": JSON_VALUES,
        },
    ),
    mostly(st.just(()), st.lists(st.sampled_from(REQUIRED), max_size=3)),
)


# The lines of a batch: MIXED_VOTE events, bytes that are no event, blank and non-object lines.
NDJSON_LINES = st.lists(
    st.one_of(
        MIXED_VOTE.map(lambda fields: json.dumps(fields, ensure_ascii=False).encode("utf-8", "surrogatepass")),
        st.binary(max_size=64).filter(lambda b: b"\n" not in b),
        st.sampled_from([b"", b"  ", b"\r", b"[]", b"null"]),
    ),
    max_size=60,
)
