"""`upvotes forget-user` on the emulator: every vote of one user retracted as "none" states through
the sink's path, exact and idempotent per request ID (a crash halfway included), later votes
counting again, older late events losing, audited, and at a cost that follows the user's votes."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

import upvotes.operations.forget_user as forget_user_module
from schemas.counters import Counts
from schemas.delta_ids import forget_event_id
from schemas.records import PostUser, hour_of_us
from schemas.vote_states import DOWN, NONE, UP, LatestVote
from spanner_reads.hourly import hourly_counts
from spanner_reads.my_votes import vote_of
from spanner_reads.reads import exact_counts
from spanner_store.tables import timestamp_micros
from spanner_store.vote_rows import StoredVote, erasure, erasures_of
from spanner_writes.votes import apply_all_vote_states
from tests.support.faults import FlakyDatabase
from tests.support.read_meter import ReadMeter
from upvotes.cli import build_parser, main
from upvotes.operations.forget_user import RequestIdInUse, forget_user, plan_retractions
from upvotes.operations.moderation import FORGET_USER, Adjustment, adjustment_of, list_adjustments, record

HOUR = 1_795_312_800
VOTED_AT = datetime.fromtimestamp(HOUR + 60, tz=timezone.utc)  # days before any request of these tests


def us(at: datetime) -> int:
    return timestamp_micros(at)


def vote(vote_: str, at: datetime = VOTED_AT, event_id: str = "e") -> LatestVote:
    return LatestVote(vote_, us(at), event_id, hour_of_us(us(at)), 1, vote_ != NONE)


def cast(database, votes: dict[tuple[str, str], str]) -> None:
    """Applies one state per (post, user), as the stream would."""
    apply_all_vote_states(database, {PostUser(post, user): vote(v) for (post, user), v in votes.items()})


def counts(database, *posts: str) -> list[Counts]:
    return [row.counts for row in exact_counts(database, list(posts))]


def stored_vote(database, post_id: str, user_id: str) -> StoredVote:
    """The user's stored vote on the post, which must be there."""
    found = vote_of(database, post_id, user_id)
    assert found is not None, (post_id, user_id)
    return found


def test_the_plan_retracts_each_vote_stored_before_the_request_once_at_the_forget_time_or_just_after_it() -> None:
    recorded = datetime.fromtimestamp(100, tz=timezone.utc)
    before, after = recorded - timedelta(seconds=1), recorded + timedelta(seconds=1)
    stored = [
        StoredVote("p1", "u", UP, 10, "e", HOUR, before),
        StoredVote("p2", "u", DOWN, 20, "e", HOUR, before),
        StoredVote("p3", "u", NONE, 30, "e", HOUR, before),
        StoredVote("p4", "u", UP, 5_000_000, "e", HOUR, before),  # stamped ahead of F, stored before
        StoredVote("p5", "u", UP, 6_000_000, "e", HOUR, after),
    ]  # cast and applied after the request
    plan = plan_retractions(stored, erasure("r", 1_000), recorded)
    assert set(plan.states) == {PostUser(post, "u") for post in ("p1", "p2", "p4")}  # p3 is "none" already
    assert plan.kept == 1 and plan.counts == Counts(upvotes=-2, downvotes=-1)
    at_forget = LatestVote(NONE, 1_000, "@forget/r", 0, 0, False)
    assert plan.states[PostUser("p1", "u")] == plan.states[PostUser("p2", "u")] == at_forget
    # The vote ahead of F is retracted on its own post just after its own time; F stays the record's.
    assert plan.states[PostUser("p4", "u")] == at_forget._replace(at_us=5_000_001)


def test_forget_retracts_up_and_down_votes_exactly_and_leaves_other_users_alone(database) -> None:
    posts = ("fa-1", "fa-2", "fa-3", "fa-4")
    cast(
        database,
        {
            ("fa-1", "gone-a"): UP,
            ("fa-2", "gone-a"): UP,
            ("fa-3", "gone-a"): DOWN,
            ("fa-4", "gone-a"): UP,
            **{(post, f"other-{i}"): (UP, DOWN)[i % 2] for post in posts for i in range(4)},
        },
    )
    taken_back = vote(NONE, VOTED_AT + timedelta(minutes=1))  # before the request: nothing to retract there
    apply_all_vote_states(database, {PostUser("fa-4", "gone-a"): taken_back})
    assert counts(database, *posts) == [
        Counts(upvotes=3, downvotes=2),
        Counts(upvotes=3, downvotes=2),
        Counts(upvotes=2, downvotes=3),
        Counts(upvotes=2, downvotes=2),
    ]

    result = forget_user(database, "req-a", "gone-a", "erasure request #1", "dpo")
    forget_at = result.request.as_of
    assert forget_at is not None  # the request's forget time

    assert (result.written, result.retracted, result.posts, result.kept, result.superseded, result.commits) == (
        True,
        3,
        3,
        0,
        0,
        1,
    )
    assert counts(database, *posts) == [Counts(upvotes=2, downvotes=2)] * 4  # only the other users' votes
    # Out of the hour the vote was counted in; nothing in the forget time's hour.
    assert [(h.hour, h.counts) for h in hourly_counts(database, "fa-3", VOTED_AT - timedelta(days=1))] == [
        (datetime.fromtimestamp(HOUR, tz=timezone.utc), Counts(upvotes=2, downvotes=2))
    ]
    for post in posts[:3]:
        retracted = stored_vote(database, post, "gone-a")  # kept, with the user ID: late events lose to it
        assert (retracted.vote, retracted.voted_at_us, retracted.event_id) == (NONE, us(forget_at), "@forget/req-a")
    assert stored_vote(database, "fa-4", "gone-a").event_id == "e"  # already "none": not rewritten
    assert all(stored_vote(database, post, "other-1").vote == DOWN for post in posts)

    audit = adjustment_of(database, "req-a")
    assert audit == result.request
    assert (audit.kind, audit.user_id, audit.post_id, audit.counts, audit.reason, audit.actor) == (
        FORGET_USER,
        "gone-a",
        "",
        Counts(upvotes=-2, downvotes=-1),
        "erasure request #1",
        "dpo",
    )
    assert audit.as_of == audit.created_at  # the forget time is the record's commit timestamp


def test_a_rerun_moves_nothing_a_later_vote_counts_and_an_older_late_event_does_not_resurrect(database) -> None:
    cast(database, {("fb-1", "gone-b"): UP, ("fb-2", "gone-b"): DOWN, ("fb-1", "stays"): UP})
    first = forget_user(database, "req-b", "gone-b", "erasure", "dpo")
    forget_at = first.request.as_of
    assert forget_at is not None  # the request's forget time
    assert first.retracted == 2 and counts(database, "fb-1", "fb-2") == [Counts(upvotes=1), Counts()]

    rerun = forget_user(database, "req-b", "gone-b", "erasure", "dpo")
    assert (rerun.written, rerun.retracted, rerun.posts, rerun.commits) == (False, 0, 0, 0)
    assert rerun.request == first.request  # the same audit row, the same forget time
    assert counts(database, "fb-1", "fb-2") == [Counts(upvotes=1), Counts()]

    after = forget_at + timedelta(seconds=1)
    apply_all_vote_states(database, {PostUser("fb-1", "gone-b"): vote(UP, after, "new")})
    late = forget_at - timedelta(minutes=1)  # cast before the forget, delivered after it
    late_totals = apply_all_vote_states(database, {PostUser("fb-2", "gone-b"): vote(DOWN, late, "late")})
    assert late_totals.superseded == 1
    assert counts(database, "fb-1", "fb-2") == [Counts(upvotes=2), Counts()]

    again = forget_user(database, "req-b", "gone-b", "erasure", "dpo")
    assert (again.retracted, again.kept) == (0, 1)  # the vote cast after the forget is not this request's
    assert counts(database, "fb-1", "fb-2") == [Counts(upvotes=2), Counts()]


def test_a_crash_after_the_first_batch_then_a_rerun_ends_exact(database) -> None:
    posts = [f"fc-{i}" for i in range(5)]
    cast(database, {**{(post, "gone-c"): UP for post in posts}, **{(post, "stays"): UP for post in posts}})

    def crash_on_the_second_batch(transaction_number: int) -> None:
        if transaction_number == 2:
            raise RuntimeError("injected: the process died after the first batch committed")

    crashing = FlakyDatabase(database, before_transaction=crash_on_the_second_batch)
    with pytest.raises(RuntimeError, match="injected"):
        forget_user(crashing, "req-c", "gone-c", "erasure", "dpo", rows_per_commit=2)
    assert crashing.injected.transactions == 2
    assert sum(c.upvotes for c in counts(database, *posts)) == 5 + 3  # the first batch of two is applied
    first_audit = adjustment_of(database, "req-c")
    assert first_audit is not None and first_audit.as_of is not None

    rerun = forget_user(database, "req-c", "gone-c", "erasure", "dpo", rows_per_commit=2)
    assert (rerun.written, rerun.retracted, rerun.posts, rerun.commits) == (False, 3, 3, 2)
    assert rerun.request == first_audit and first_audit.as_of == first_audit.created_at
    assert counts(database, *posts) == [Counts(upvotes=1)] * 5
    assert {(v.vote, v.voted_at_us, v.event_id) for v in (stored_vote(database, post, "gone-c") for post in posts)} == {
        (NONE, us(first_audit.as_of), forget_event_id("req-c"))
    }  # both runs wrote the same state
    assert [a.adjustment_id for a in list_adjustments(database, 1_000)].count("req-c") == 1


def test_a_vote_in_flight_when_the_request_runs_does_not_count_when_it_arrives(database) -> None:
    """The user's "up" on a post where the user has no stored vote yet (in an open window, the
    backlog or a dead-letter batch when the request runs) is applied afterwards: it must not count.
    One cast after the forget time still does, on that post and on any other."""
    cast(database, {("fi-1", "gone-i"): UP, ("fi-2", "stays"): UP})
    result = forget_user(database, "req-i", "gone-i", "erasure", "dpo")
    forget_at = result.request.as_of
    assert forget_at is not None  # the request's forget time
    assert result.retracted == 1

    in_flight = vote(UP, forget_at - timedelta(minutes=3), "in-flight")  # cast before the request
    totals = apply_all_vote_states(database, {PostUser("fi-2", "gone-i"): in_flight})
    assert counts(database, "fi-1", "fi-2") == [Counts(), Counts(upvotes=1)]
    stored = stored_vote(database, "fi-2", "gone-i")  # the request's own "none", as if it had found a vote there
    assert (stored.vote, stored.voted_at_us, stored.event_id, totals.applied) == (
        NONE,
        us(forget_at),
        forget_event_id("req-i"),
        1,
    )

    later = vote(UP, forget_at + timedelta(seconds=1), "after")
    apply_all_vote_states(database, {PostUser("fi-2", "gone-i"): later, PostUser("fi-3", "gone-i"): later})
    assert counts(database, "fi-1", "fi-2", "fi-3") == [Counts(), Counts(upvotes=2), Counts(upvotes=1)]


def test_a_vote_stamped_ahead_of_the_forget_time_is_retracted_without_silencing_the_users_later_votes(database) -> None:
    """The forget time is the record's commit time, not the newest vote's: a vote whose event time
    runs ahead of it (a publisher's clock ahead, by up to the clock skew) is retracted on its own
    post, and the user's genuine votes cast after the request count on every other post."""
    ahead = datetime.now(timezone.utc) + timedelta(minutes=30)
    apply_all_vote_states(
        database, {PostUser("fj-1", "gone-j"): vote(UP, ahead, "ahead"), PostUser("fj-2", "gone-j"): vote(UP)}
    )
    result = forget_user(database, "req-j", "gone-j", "erasure", "dpo")
    forget_at = result.request.as_of
    assert forget_at is not None  # the request's forget time
    assert (result.retracted, result.kept) == (2, 0) and forget_at < ahead
    assert counts(database, "fj-1", "fj-2") == [Counts(), Counts()]

    genuine = vote(UP, forget_at + timedelta(minutes=5), "genuine")  # cast five minutes after the request
    apply_all_vote_states(database, {PostUser("fj-2", "gone-j"): genuine, PostUser("fj-3", "gone-j"): genuine})
    assert counts(database, "fj-1", "fj-2", "fj-3") == [Counts(), Counts(upvotes=1), Counts(upvotes=1)]
    rerun = forget_user(database, "req-j", "gone-j", "erasure", "dpo")
    assert (rerun.retracted, rerun.kept) == (0, 2)  # the votes cast after the request are the user's own


def test_a_vote_in_flight_when_the_request_runs_adds_no_unique_voter(database) -> None:
    """Issue 44, item 6: the in-flight vote of a forgotten user counts nothing when it arrives, and
    its user must not join the post's unique voters either (`upvotes read --unique`)."""
    cast(database, {("fu-1", "stays"): UP})
    forget_user(database, "req-u", "gone-u", "erasure", "dpo")
    in_flight = vote(UP, VOTED_AT + timedelta(minutes=1), "in-flight")  # cast before the request
    apply_all_vote_states(database, {PostUser("fu-1", "gone-u"): in_flight})
    (totals,) = exact_counts(database, ["fu-1"], unique=True)
    assert (totals.counts, totals.unique_voters) == (Counts(upvotes=1), 1)  # "stays" alone
    assert stored_vote(database, "fu-1", "gone-u").event_id == forget_event_id("req-u")


@pytest.fixture(params=[timedelta(hours=1), -timedelta(hours=1)], ids=["clock_ahead", "clock_behind"])
def operator_clock_skew(request, monkeypatch) -> timedelta:
    """The operator machine's clock an hour ahead or behind: every `datetime.now` the request's
    module asks is off by that much (the forget time must not come from it)."""
    skew = request.param

    class SkewedClock(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.now(tz) + skew

    monkeypatch.setattr(forget_user_module, "datetime", SkewedClock)
    return skew


def test_the_forget_time_is_the_records_commit_timestamp_whatever_the_operators_clock(
    database, operator_clock_skew
) -> None:
    """Issue 44, item 7: with the operator's clock an hour off either way, the forget time F is the
    commit timestamp of the request's record (its audit row's CreatedAt, its UserErasures row), the
    clock every reader agrees on. A vote in flight stamped between the operator's clock and F, and a
    genuine vote just after F, each count exactly when they are later than F."""
    tag = "ahead" if operator_clock_skew > timedelta(0) else "behind"
    user, posts = f"gone-k-{tag}", [f"fk-{tag}-{i}" for i in range(3)]
    cast(database, {(posts[0], user): UP})
    started = datetime.now(timezone.utc)
    result = forget_user(database, f"req-k-{tag}", user, "erasure", "dpo")
    finished = datetime.now(timezone.utc)

    forget_at = result.request.as_of
    assert forget_at is not None  # the request's forget time
    assert forget_at == result.request.created_at  # the record's commit timestamp
    assert started - timedelta(seconds=5) <= forget_at <= finished + timedelta(seconds=5)
    with database.snapshot() as snapshot:
        assert erasures_of(snapshot, [user])[user].at_us == us(forget_at)

    in_flight_at = forget_at + operator_clock_skew / 2  # between the operator's clock and F
    genuine_at = forget_at + timedelta(seconds=1)
    apply_all_vote_states(
        database,
        {
            PostUser(posts[1], user): vote(UP, in_flight_at, "in-flight"),
            PostUser(posts[2], user): vote(UP, genuine_at, "genuine"),
        },
    )
    counted_in_flight = 1 if in_flight_at > forget_at else 0  # ahead: cast after F; behind: before it
    assert counts(database, *posts) == [Counts(), Counts(upvotes=counted_in_flight), Counts(upvotes=1)]


def test_a_request_an_earlier_version_recorded_with_its_operators_clock_reruns_with_that_time(database) -> None:
    """Before issue 44 the forget time was the operator's clock, and before UserErasures existed a
    request had no erasure row: its rerun by ID keeps that forget time, writes the missing erasure
    with it, and retracts what the first run had not."""
    cast(database, {("fo-1", "gone-o"): UP, ("fo-2", "gone-o"): DOWN})
    operators_clock = datetime.now(timezone.utc) - timedelta(minutes=30)
    # What that version's first run committed before it stopped: the audit row alone.
    assert record(
        database,
        Adjustment(
            "req-o",
            "",
            FORGET_USER,
            Counts(upvotes=-1, downvotes=-1),
            "erasure",
            "dpo",
            operators_clock,
            None,
            "gone-o",
        ),
    )

    rerun = forget_user(database, "req-o", "gone-o", "erasure", "dpo")
    assert (rerun.written, rerun.retracted, rerun.request.as_of) == (False, 2, operators_clock)
    with database.snapshot() as snapshot:
        assert erasures_of(snapshot, ["gone-o"])["gone-o"].at_us == us(operators_clock)
    assert counts(database, "fo-1", "fo-2") == [Counts(), Counts()]
    assert stored_vote(database, "fo-1", "gone-o").voted_at_us == us(operators_clock)
    assert forget_user(database, "req-o", "gone-o", "erasure", "dpo").retracted == 0


def test_an_id_used_by_another_request_is_refused_before_any_write(database) -> None:
    cast(database, {("fd-1", "first"): UP, ("fd-1", "second"): UP})
    forget_user(database, "req-d", "first", "erasure", "dpo")
    with pytest.raises(RequestIdInUse, match="req-d"):
        forget_user(database, "req-d", "second", "erasure", "dpo")
    assert counts(database, "fd-1") == [Counts(upvotes=1)] and stored_vote(database, "fd-1", "second").vote == UP


def test_the_cost_follows_the_users_votes_not_the_other_voters(database) -> None:
    """400 votes of 100 other users on the same posts; the request reads the user's 4 rows (one
    key range) before and after recording itself, then each again in its batch's transaction with
    the user's erasure row and suspension rows (none), and the audit row: nothing else."""
    posts = [f"fe-{i}" for i in range(4)]
    cast(
        database,
        {
            **{(post, f"crowd-{i}"): UP for post in posts for i in range(100)},
            **{(post, "gone-e"): DOWN for post in posts},
        },
    )
    meter = ReadMeter(database)
    result = forget_user(meter, "req-e", "gone-e", "erasure", "dpo")
    assert result.retracted == 4
    # The user's rows before and after the record and in the batch's transaction, with the user's erasure.
    assert meter.rows == {"Votes": 3 * 4, "Adjustments": 1, "UserErasures": 1, "UserSuspensions": 0}
    assert meter.queries == 0
    assert counts(database, *posts) == [Counts(upvotes=100)] * 4


def cli(stack, capsys, *args: str) -> tuple[list[dict], str]:
    assert (
        main(
            [args[0], "--project", stack.project, "--instance", stack.instance, "--database", stack.database, *args[1:]]
        )
        == 0
    )
    captured = capsys.readouterr()
    return [json.loads(line) for line in captured.out.splitlines()], captured.err


def test_the_command_end_to_end_with_its_audit_in_adjust_list(stack, database, capsys) -> None:
    cast(database, {("ff-1", "gone-f"): UP, ("ff-2", "gone-f"): DOWN, ("ff-1", "stays"): UP})
    forget = ("forget-user", "gone-f", "--reason", "GDPR erasure #7", "--actor", "dpo")

    (summary,), err = cli(stack, capsys, *forget)
    request_id = summary["adjustment_id"]  # a random UUID, printed before any write
    assert f"run it again with --id {request_id}" in err and "retracted 2 votes on 2 posts in 1 commits" in err
    assert {
        k: summary[k]
        for k in (
            "kind",
            "user_id",
            "post_id",
            "upvotes",
            "downvotes",
            "written_now",
            "retracted",
            "posts",
            "kept",
            "commits",
            "reason",
            "actor",
        )
    } == {
        "kind": FORGET_USER,
        "user_id": "gone-f",
        "post_id": "",
        "upvotes": -1,
        "downvotes": -1,
        "written_now": True,
        "retracted": 2,
        "posts": 2,
        "kept": 0,
        "commits": 1,
        "reason": "GDPR erasure #7",
        "actor": "dpo",
    }
    assert counts(database, "ff-1", "ff-2") == [Counts(upvotes=1), Counts()]

    (rerun,), err = cli(stack, capsys, *forget, "--id", request_id)
    assert (rerun["written_now"], rerun["retracted"], rerun["as_of"]) == (False, 0, summary["as_of"])
    assert "a rerun of this request" in err

    listed, _ = cli(stack, capsys, "adjust", "--list")
    (row,) = [a for a in listed if a["adjustment_id"] == request_id]
    assert (row["kind"], row["user_id"], row["post_id"], row["as_of"]) == (FORGET_USER, "gone-f", "", summary["as_of"])

    assert (
        main(
            [
                "forget-user",
                "--project",
                stack.project,
                "--instance",
                stack.instance,
                "--database",
                stack.database,
                "gone-f",
            ]
        )
        == 2
    )
    assert "--reason is required" in capsys.readouterr().err
    with pytest.raises(SystemExit) as help_exit:
        build_parser().parse_args(["forget-user", "--help"])
    assert help_exit.value.code == 0 and capsys.readouterr().out.startswith("usage: upvotes forget-user")
