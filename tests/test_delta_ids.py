"""schemas/delta_ids.py: every spelling of a delta's identity, from its one owner."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from schemas.delta_ids import (
    FIRST_KEY_FORMAT,
    FIRST_SUM_SHARDS,
    adjustment_delta_id,
    forget_event_id,
    pane_delta_id,
    pane_window_end_us,
    replay_delta_id,
    shards_of_key,
    sum_shard,
    vote_delta_id,
    writer_identity,
)


def test_a_pane_is_spelled_in_its_generations_format_and_the_first_format_stays_writable() -> None:
    writer = writer_identity("upvotes-streaming", 3)
    assert writer == "upvotes-streaming#g3" and writer_identity("old-job", 0) == "old-job"
    assert pane_delta_id(writer, 10, 0, 20, 64) == "upvotes-streaming#g3:10:0:20:64"
    assert pane_delta_id("old-job", 10, 0, 20, 64, key_format=FIRST_KEY_FORMAT) == "old-job:10:0"
    # Two layouts of the same window start and pane (an update changed the window or the shards): two keys.
    assert len({pane_delta_id(writer, 10, 0, end, shards) for end in (20, 30) for shards in (32, 64)}) == 4


@given(
    st.from_regex(r"[a-z][-a-z0-9]{0,62}", fullmatch=True),
    st.integers(0, 2**62),
    st.integers(0, 100),
    st.integers(1, 2**20),
)
def test_a_panes_window_end_is_read_back_from_its_id_and_no_other_id_has_one(
    name: str, start: int, pane: int, shards: int
) -> None:
    end = start + 2_000_000
    assert pane_window_end_us(pane_delta_id(writer_identity(name, 2), start, pane, end, shards)) == end
    assert pane_window_end_us(pane_delta_id(name, start, pane, end, shards, key_format=FIRST_KEY_FORMAT)) is None
    assert {pane_window_end_us(f(name)) for f in (vote_delta_id, adjustment_delta_id, replay_delta_id)} == {None}


@given(st.text(min_size=1, max_size=128))
def test_the_ids_of_other_writers_never_equal_a_panes(name: str) -> None:
    others = {vote_delta_id(name), adjustment_delta_id(name), replay_delta_id(name)}
    assert len(others) == 3 and all(other.startswith("@") for other in others)
    assert forget_event_id(name) == f"@forget/{name}"


@given(st.text(min_size=1, max_size=128), st.sampled_from([FIRST_SUM_SHARDS, 8, 64, 1000]))
def test_a_grouping_key_carries_its_shard_count(post_id: str, shards: int) -> None:
    key = sum_shard(post_id, shards)
    assert shards_of_key(key) == shards and key == sum_shard(post_id, shards)
