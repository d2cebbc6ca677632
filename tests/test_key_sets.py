"""spanner_store/key_sets.py's KeySet: the same protobuf as the client library's, byte for byte."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from google.cloud import spanner
from hypothesis import given
from hypothesis import strategies as st

from spanner_store.key_sets import KeySet

EPOCH = datetime(2020, 1, 1, tzinfo=timezone.utc)
# The key parts the project's keys have: INT64 hashes, STRING ids, TIMESTAMP commit times (and
# booleans, which are ints in Python that the client encodes otherwise).
parts = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.text(max_size=12),
    st.booleans(),
    st.integers(0, 10**15).map(lambda us: EPOCH + timedelta(microseconds=us)),
)
keys = st.lists(parts, max_size=3)
bounds = st.sampled_from(
    [
        ("start_open", "end_closed"),
        ("start_closed", "end_open"),
        ("start_closed", "end_closed"),
        ("start_open",),
        ("end_closed",),
    ]
)


@st.composite
def key_ranges(draw) -> spanner.KeyRange:
    """A range with the bounds drawn (an absent one is closed and empty); the client wants one of them non-empty."""
    drawn = {bound: draw(keys) for bound in draw(bounds)}
    first = next(iter(drawn))
    drawn[first] = drawn[first] or [draw(parts)]
    return spanner.KeyRange(**drawn)


def serialized(key_set: spanner.KeySet) -> bytes:
    message = key_set._to_pb()
    return type(message).serialize(message)


@given(st.lists(keys, max_size=20), st.lists(key_ranges(), max_size=20))
def test_the_same_message_as_the_clients(key_list, ranges):
    assert serialized(KeySet(keys=key_list, ranges=ranges)) == serialized(spanner.KeySet(keys=key_list, ranges=ranges))


def test_all_rows_and_empty_bounds():
    assert serialized(KeySet(all_=True)) == serialized(spanner.KeySet(all_=True))
    # A bound not given is closed and empty (to the end of the table): it must be in the message,
    # not left out, or the range would mean something else.
    open_ended = [spanner.KeyRange(start_open=[7, "p-1"])]
    message = KeySet(ranges=open_ended)._to_pb()
    raw_range = type(message).pb(message).ranges[0]
    assert raw_range.HasField("end_closed") and not raw_range.end_closed.values
    assert serialized(KeySet(ranges=open_ended)) == serialized(spanner.KeySet(ranges=open_ended))
