"""Hourly counts on the Spanner emulator: exact before a fold, after one, and across one."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from google.cloud.spanner_v1 import param_types

from schemas import post_hash
from schemas.counters import Counts
from schemas.records import PostDelta
from schemas.voter_sketch import sketch_of
from spanner_reads.hourly import HourCount, hourly_counts
from spanner_writes.deltas import write_deltas
from tests.support.fold_runs import run_fold as fold
from upvotes.cli import build_parser, main

DAY = datetime(2026, 11, 22, tzinfo=timezone.utc)
H1, H2, H3, H4 = (DAY + timedelta(hours=h) for h in (1, 2, 3, 4))


def add(database, post_id: str, tag: str, deltas: list[tuple[datetime, int, int]]) -> dict[datetime, tuple[int, int]]:
    """Writes (event hour, upvotes, shares) deltas of one post; returns their per-hour sums."""
    rows = [
        PostDelta.of(post_id, int(hour.timestamp()), f"{tag}:{i}", upvotes=up, shares=sh, events=abs(up) + abs(sh))
        for i, (hour, up, sh) in enumerate(deltas)
    ]
    write_deltas(database, rows)
    sums: dict[datetime, tuple[int, int]] = {}
    for hour, up, sh in deltas:
        a, b = sums.get(hour, (0, 0))
        sums[hour] = (a + up, b + sh)
    return sums


def merged(*parts: dict[datetime, tuple[int, int]]) -> list[HourCount]:
    total: dict[datetime, tuple[int, int]] = {}
    for part in parts:
        for hour, (up, sh) in part.items():
            a, b = total.get(hour, (0, 0))
            total[hour] = (a + up, b + sh)
    return [HourCount(hour, Counts(upvotes=up, shares=sh)) for hour, (up, sh) in sorted(total.items())]


def sides(database, post_id: str) -> tuple[dict, dict]:
    """What the rollup holds and what is still unfolded, per hour, read separately."""
    params = {"h": post_hash(post_id), "p": post_id}
    types = {"h": param_types.INT64, "p": param_types.STRING}
    with database.snapshot(multi_use=True) as snapshot:
        rollup = {
            r[0]: (r[1], r[2])
            for r in snapshot.execute_sql(
                "SELECT EventHour, Upvotes, Shares FROM PostHourlyCounts WHERE PostHash = @h AND PostId = @p",
                params=params,
                param_types=types,
            )
        }
        unfolded = {
            r[0]: (r[1], r[2])
            for r in snapshot.execute_sql(
                "SELECT d.EventHour, SUM(d.Upvotes), SUM(d.Shares) FROM Posts AS p JOIN PostDeltas AS d "
                "ON d.PostHash = p.PostHash AND d.PostId = p.PostId AND d.CommittedAt > p.FoldedThrough "
                "WHERE p.PostHash = @h AND p.PostId = @p GROUP BY d.EventHour",
                params=params,
                param_types=types,
            )
        }
    return rollup, unfolded


def test_hourly_counts_are_exact_before_a_fold_after_it_and_across_it(stack, database) -> None:
    first = add(database, "hr-a", "b1", [(H1, 3, 1), (H1, 2, 0), (H2, 5, 2), (H3, 1, 0), (H3, 4, 3)])
    other = add(database, "hr-b", "b1", [(H1, 100, 100), (H2, 100, 100)])  # must never leak into hr-a

    assert (
        hourly_counts(database, "hr-a", DAY)
        == merged(first)
        == [
            HourCount(H1, Counts(upvotes=5, shares=1)),
            HourCount(H2, Counts(upvotes=5, shares=2)),
            HourCount(H3, Counts(upvotes=5, shares=3)),
        ]
    )
    assert sides(database, "hr-a")[0] == {}  # before the fold: all from the deltas

    assert fold(stack).deltas_folded == 7
    assert sides(database, "hr-a") == ({H1: (5, 1), H2: (5, 2), H3: (5, 3)}, {})  # all from the rollup
    assert hourly_counts(database, "hr-a", DAY) == merged(first)

    # A second batch, unfolded, in hours the rollup already has, with an un-vote.
    second = add(database, "hr-a", "b2", [(H2, 7, 0), (H3, -1, 1), (H3, 2, 0)])
    rollup, unfolded = sides(database, "hr-a")
    assert rollup == {H1: (5, 1), H2: (5, 2), H3: (5, 3)} and unfolded == {H2: (7, 0), H3: (1, 1)}
    expected = merged(first, second)
    assert expected == [
        HourCount(H1, Counts(upvotes=5, shares=1)),
        HourCount(H2, Counts(upvotes=12, shares=2)),
        HourCount(H3, Counts(upvotes=6, shares=4)),
    ]
    assert hourly_counts(database, "hr-a", DAY) == expected  # rollup + unfolded, per hour

    assert fold(stack).deltas_folded == 3
    assert sides(database, "hr-a")[1] == {}
    assert hourly_counts(database, "hr-a", DAY) == expected
    assert hourly_counts(database, "hr-b", DAY) == merged(other)
    assert hourly_counts(database, "hr-unknown", DAY) == []


def test_since_and_until_select_whole_hours_on_both_sides(stack, database) -> None:
    folded = add(database, "hr-f", "b1", [(H1, 1, 0), (H2, 2, 0), (H3, 3, 1)])
    fold(stack)
    unfolded = add(database, "hr-f", "b2", [(H1, 10, 0), (H3, 30, 0), (H4, 40, 4)])
    rollup, pending = sides(database, "hr-f")
    assert set(rollup) == {H1, H2, H3} and set(pending) == {H1, H3, H4}  # both sides are in play
    every = merged(folded, unfolded)
    assert [c.hour for c in every] == [H1, H2, H3, H4]

    assert hourly_counts(database, "hr-f", DAY) == every
    assert hourly_counts(database, "hr-f", H2) == every[1:]
    assert hourly_counts(database, "hr-f", H2, until=H4) == every[1:3]  # until is exclusive
    assert hourly_counts(database, "hr-f", H1, until=H2) == [HourCount(H1, Counts(upvotes=11))]
    # Mid-hour bounds: an hour counts when it overlaps [since, until).
    assert hourly_counts(database, "hr-f", H2 + timedelta(minutes=30), until=H3 + timedelta(minutes=1)) == every[1:3]
    assert hourly_counts(database, "hr-f", H4 + timedelta(hours=1)) == []
    # A naive datetime is UTC; a zone-aware one in another zone is converted.
    assert hourly_counts(database, "hr-f", H3.replace(tzinfo=None)) == every[2:]
    plus_two = timezone(timedelta(hours=2))
    assert hourly_counts(database, "hr-f", H3.astimezone(plus_two)) == every[2:]


def test_upvotes_read_hourly_prints_json_lines(stack, database, capsys) -> None:
    add(database, "hr-c", "b1", [(H1, 2, 1), (H3, 1, 0)])
    where = ["read", "--project", stack.project, "--instance", stack.instance, "--database", stack.database]
    parser = build_parser()

    args = parser.parse_args(where + ["--hourly", "--since", "2026-11-22T00:00:00Z", "hr-c"])
    assert args.hourly and args.since == DAY and args.until is None
    assert main(where + ["--hourly", "--since", "2026-11-22T00:00:00Z", "hr-c"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines == [
        {"post_id": "hr-c", "hour": "2026-11-22T01:00:00Z", **Counts(upvotes=2, shares=1)._asdict()},
        {"post_id": "hr-c", "hour": "2026-11-22T03:00:00Z", **Counts(upvotes=1, shares=0)._asdict()},
    ]

    assert (
        main(where + ["--hourly", "--since", "2026-11-22T02:00:00+00:00", "--until", "2026-11-22T03:00:00Z", "hr-c"])
        == 0
    )
    assert capsys.readouterr().out == ""  # only hour 02:00 asked for, and it has no votes

    with pytest.raises(SystemExit):
        parser.parse_args(where + ["--hourly", "--since", "yesterday", "hr-c"])
    assert "not an RFC 3339 time" in capsys.readouterr().err


def test_upvotes_read_unique_adds_unique_voters_in_total_and_per_hour(stack, database, capsys) -> None:
    hour = lambda moment: int(moment.timestamp())  # noqa: E731
    write_deltas(
        database,
        [
            PostDelta.of("uv-c", hour(H1), "u1", upvotes=3, events=3, voters=sketch_of(["a", "b", "c"])),
            PostDelta.of("uv-c", hour(H2), "u2", upvotes=2, shares=1, events=3, voters=sketch_of(["c", "d"])),
        ],
    )
    fold(stack)  # folded and unfolded sketches meet in one read
    write_deltas(database, [PostDelta.of("uv-c", hour(H2), "u3", upvotes=1, events=1, voters=sketch_of(["e"]))])
    where = ["read", "--project", stack.project, "--instance", stack.instance, "--database", stack.database]
    assert main(where + ["--unique", "uv-c", "nobody"]) == 0
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == [
        {"post_id": "uv-c", **Counts(upvotes=6, shares=1)._asdict(), "unique_voters": 5},
        {"post_id": "nobody", **Counts(upvotes=0, shares=0)._asdict(), "unique_voters": 0},
    ]
    assert main(where + ["--hourly", "--unique", "--since", "2026-11-22T00:00:00Z", "uv-c"]) == 0
    assert [
        (r["hour"][11:13], r["upvotes"], r["unique_voters"])
        for r in map(json.loads, capsys.readouterr().out.splitlines())
    ] == [("01", 3, 3), ("02", 3, 3)]
