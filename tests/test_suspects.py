"""`upvotes suspects` (issue 46): the pure detection (upvotes/operations/suspect_rules.py) on hand-made votes, the read
of the votes since a time from the change log (spanner_reads/recent_votes.py) on the emulator, and
the command end to end."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone

import pytest

from schemas.records import PostUser, hour_of_us
from schemas.vote_states import DOWN, NONE, UP, LatestVote
from spanner_reads.recent_votes import votes_since
from spanner_store.tables import timestamp_micros
from spanner_writes.votes import apply_all_vote_states
from tests.support.read_meter import ReadMeter
from upvotes.cli import main
from upvotes.operations.suspect_rules import (
    LOCKSTEP,
    SERIAL,
    CastVote,
    Rules,
    find_lockstep,
    find_serial,
    find_suspects,
)
from upvotes.operations.suspensions import suspend_users

MINUTE = 60_000_000
START = 1_795_312_800 * 1_000_000


def ring_votes(
    ring: list[str], posts: list[str], first_us: int, spread_us: int, rng: random.Random, vote: str = UP
) -> list[CastVote]:
    """Every member votes every post, each post's votes within `spread_us`, posts 20 minutes apart."""
    return [
        CastVote(user, post, vote, first_us + 20 * MINUTE * i + rng.randrange(spread_us))
        for i, post in enumerate(posts)
        for user in ring
    ]


def honest_votes(rng: random.Random, users: int, posts: int, votes_per_user: int, span_us: int) -> list[CastVote]:
    votes = []
    for u in range(users):
        for post in rng.sample(range(posts), votes_per_user):
            votes.append(CastVote(f"h{u}", f"p{post}", rng.choice([UP, UP, UP, DOWN]), START + rng.randrange(span_us)))
    return votes


def crowd(rng: random.Random, post: str, users: list[str], minute: int) -> list[CastVote]:
    """Many honest users voting one viral post in the same minute."""
    return [CastVote(user, post, UP, START + minute * MINUTE + rng.randrange(MINUTE)) for user in users]


def test_a_ring_among_honest_users_and_crowds_is_found_whole_and_alone() -> None:
    rng = random.Random(46)
    ring = [f"ring{i}" for i in range(12)]
    honest = honest_votes(rng, 400, 300, 8, 6 * 60 * MINUTE)
    # Crowds: the 40 heaviest honest users vote each of 8 viral posts in its viral minute, with 200 others.
    heavy = [f"h{u}" for u in range(40)]
    crowds = [
        vote
        for i in range(8)
        for vote in crowd(rng, f"viral{i}", heavy + [f"c{i}-{j}" for j in range(200)], 30 + 20 * i)
    ]
    targets = [f"p{i}" for i in range(6)]
    votes = honest + crowds + ring_votes(ring, targets, START + 10 * MINUTE, 5 * MINUTE, rng)
    rng.shuffle(votes)
    (group,) = find_lockstep(votes)
    assert (group.kind, group.users, group.posts) == (LOCKSTEP, tuple(sorted(ring)), tuple(sorted(targets)))
    assert group.score == 12 * 6 and group.last_us - group.first_us < 6 * 20 * MINUTE
    # Without the share rule the heavy users of the crowds are a "group" too: the rule is what rejects them.
    loose = find_lockstep(votes, Rules(min_share=0.0))
    assert any(set(s.users) <= set(heavy) for s in loose)


def test_votes_straddling_a_bin_boundary_still_make_a_group() -> None:
    """Each post's votes are within Δt but cross a boundary of the first grid: the offset grid holds them."""
    rules = Rules()
    width = round(2 * rules.within_s * 1_000_000)
    ring = [f"ring{i}" for i in range(10)]
    boundary = (START // width + 1) * width
    votes = [
        CastVote(user, f"p{i}", UP, boundary + 40 * MINUTE * i + (j - 5) * MINUTE)
        for i in range(5)
        for j, user in enumerate(ring)
    ]
    (group,) = find_lockstep(votes, rules)
    assert group.users == tuple(sorted(ring)) and len(group.posts) == 5


def test_too_few_users_posts_or_too_far_apart_is_no_group() -> None:
    rng = random.Random(7)
    nine = ring_votes([f"r{i}" for i in range(9)], [f"p{i}" for i in range(6)], START, MINUTE, rng)
    four_posts = ring_votes([f"r{i}" for i in range(12)], [f"p{i}" for i in range(4)], START, MINUTE, rng)
    spread = ring_votes([f"r{i}" for i in range(12)], [f"p{i}" for i in range(6)], START, 120 * MINUTE, rng)
    assert find_lockstep(nine) == find_lockstep(four_posts) == find_lockstep(spread) == []
    assert find_lockstep(nine, Rules(min_users=9)) != []


def test_a_ring_that_downvotes_in_lockstep_is_found_and_opposite_votes_do_not_make_one() -> None:
    rng = random.Random(8)
    ring = [f"r{i}" for i in range(10)]
    brigade = ring_votes(ring, [f"p{i}" for i in range(5)], START, MINUTE, rng, vote=DOWN)
    assert [g.users for g in find_lockstep(brigade)] == [tuple(sorted(ring))]
    mixed = [v._replace(vote=UP if i % 2 else DOWN) for i, v in enumerate(brigade)]
    assert find_lockstep(mixed) == []


def test_a_serial_voter_is_the_densest_window_over_the_threshold() -> None:
    serial = [CastVote("bot", f"p{i}", UP, START + i * 5_000_000) for i in range(150)]  # one every 5 s
    human = [CastVote("fast-human", f"p{i}", UP, START + i * 7_000_000) for i in range(90)]  # 90 votes
    (found,) = find_serial(serial + human)
    assert (found.kind, found.users, found.score) == (SERIAL, ("bot",), 121)  # 121 votes within 10 minutes
    assert found.last_us - found.first_us == 600_000_000 and len(found.posts) == 121
    assert [s.kind for s in find_suspects(serial + human)] == [SERIAL]


def test_rules_refuse_nonsense() -> None:
    for wrong in ({"min_users": 1}, {"within_s": 0}, {"min_share": 2}, {"min_cohesion": -1}, {"serial_votes": 1}):
        with pytest.raises(ValueError):
            Rules(**wrong)


# --- the read, on the emulator -------------------------------------------------------------------


def state(vote: str, at: datetime) -> LatestVote:
    at_us = timestamp_micros(at)
    return LatestVote(vote, at_us, "e", hour_of_us(at_us), 1, vote != NONE)


def test_the_votes_since_a_time_come_from_the_change_log_users_not_the_catalogue(database) -> None:
    now = datetime.now(timezone.utc)
    apply_all_vote_states(
        database,
        {
            PostUser("rv-1", "recent-a"): state(UP, now - timedelta(minutes=5)),
            PostUser("rv-2", "recent-a"): state(DOWN, now - timedelta(minutes=50)),
            PostUser("rv-1", "recent-b"): state(NONE, now - timedelta(minutes=4)),
            PostUser("rv-1", "held"): state(UP, now - timedelta(minutes=3)),
        },
    )
    suspend_users(database, "rv-held", ["held"], "ring", "t&s")
    since = now - timedelta(minutes=30)
    meter = ReadMeter(database)
    read = votes_since(meter, since, skew=timedelta(0))
    mine = sorted((v.user_id, v.post_id, v.vote) for v in read.votes if v.post_id.startswith("rv-"))
    assert mine == [("recent-a", "rv-1", UP)]  # older than `since`, "none", held out: left out
    # The commits since (the sink's, listing the three users; the suspension's pass, listing none), then
    # those users' Votes rows, one key range each: their whole history, the older vote included; and
    # their suspension rows (the held user's one: its pass moved the user whole, with no mark per vote).
    assert (read.commits_read, read.users_read, read.votes_rows_read) == (2, 3, 4)
    assert meter.rows == {"DeltaCommits": 2, "Votes": 4, "UserSuspensions": 1} and meter.queries == 0
    later = votes_since(database, datetime.now(timezone.utc) + timedelta(minutes=1), skew=timedelta(0))
    assert (later.votes, later.commits_read, later.users_read) == ([], 0, 0)


def test_the_command_reports_a_ring_as_json_lines(stack, database, capsys) -> None:
    now = datetime.now(timezone.utc)
    rng = random.Random(3)
    ring = [f"cli-ring{i}" for i in range(10)]
    states = {
        PostUser(f"cli-p{i}", user): state(UP, now - timedelta(minutes=90 - 10 * i, seconds=rng.randrange(60)))
        for i in range(5)
        for user in ring
    }
    states.update(
        {
            PostUser(f"cli-p{rng.randrange(50)}", f"cli-h{u}"): state(UP, now - timedelta(minutes=rng.randrange(100)))
            for u in range(100)
        }
    )
    apply_all_vote_states(database, states)
    assert (
        main(
            [
                "suspects",
                "--project",
                stack.project,
                "--instance",
                stack.instance,
                "--database",
                stack.database,
                "--since",
                "2h",
                "--json",
            ]
        )
        == 0
    )
    out, err = capsys.readouterr()
    groups = [json.loads(line) for line in out.splitlines()]
    ours = [g for g in groups if set(g["users"]) & set(ring)]
    assert [(g["kind"], g["users"], g["posts"], g["score"]) for g in ours] == [
        (LOCKSTEP, sorted(ring), [f"cli-p{i}" for i in range(5)], 50)
    ]
    assert set(ours[0]["window"]) == {"start", "end"} and ours[0]["window"]["start"] < ours[0]["window"]["end"]
    assert "lockstep groups" in err and "rows" in err
