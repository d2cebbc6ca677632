"""Suspensions (issue 46) on the emulator: `upvotes suspend-users` holds a ring's vote-state votes out
of every count in their own hours, exactly and retroactively, a vote in flight included, and
`upvotes restore-users` counts them again with their latest states; each request audited, a crash
anywhere followed by a rerun moving nothing twice, two suspensions of one user, a forgotten user,
unique voters, the cost, and the commands. (The interleavings are property-tested in
tests/test_suspension_properties.py.)"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

import upvotes.operations.suspensions as suspensions_module
from schemas import user_hash
from schemas.counters import Counts
from schemas.records import PostUser, hour_of_us
from schemas.vote_states import DOWN, NONE, UP, Hold, LatestVote
from spanner_reads.hourly import hourly_counts
from spanner_reads.my_votes import vote_of
from spanner_reads.reads import exact_counts
from spanner_store.database import MUTATION_BUDGET, run_with_retries
from spanner_store.suspended_users import SuspendedUsers
from spanner_store.vote_rows import StoredVote, UserSuspension, holds_of
from spanner_writes.votes import apply_all_vote_states, apply_vote_states, plan_vote_changes
from tests.support.faults import FlakyDatabase
from tests.support.read_meter import ReadMeter
from transforms.parse_and_sum import vote_shard
from transforms.vote_state_sink import ApplyVoteStatesFn
from upvotes.cli import main
from upvotes.operations.forget_user import forget_user
from upvotes.operations.suspension_passes import (
    PASS_COST,
    UserPlan,
    plan_moves,
    plan_user_moves,
    plan_user_passes,
    users_pass_cost,
)
from upvotes.operations.suspensions import (
    RESTORE,
    SUSPEND,
    RequestResult,
    SuspensionIdInUse,
    UnknownSuspension,
    list_suspensions,
    requests_of,
    restore_users,
    suspend_users,
)

HOUR = 1_795_312_800  # two event hours: HOUR and HOUR + 3600
T0 = HOUR * 1_000_000


def at(seconds: int) -> int:
    """A time in microseconds, `seconds` after the first hour's start."""
    return T0 + seconds * 1_000_000


def state(vote: str, at_us: int, event_id: str = "e") -> LatestVote:
    return LatestVote(vote, at_us, event_id, hour_of_us(at_us), 1, vote != NONE)


def cast(database, votes: dict[tuple[str, str], tuple[str, int]]) -> None:
    """One state per (post, user): (vote, time), through the sink's own path."""
    apply_all_vote_states(database, {PostUser(p, u): state(v, t) for (p, u), (v, t) in votes.items()})


def counts(database, *posts: str) -> list[Counts]:
    return [row.counts for row in exact_counts(database, list(posts))]


def stored_vote(database, post_id: str, user_id: str) -> StoredVote:
    """The user's stored vote on the post, which must be there."""
    found = vote_of(database, post_id, user_id)
    assert found is not None, (post_id, user_id)
    return found


def counts_nothing(database, post_id: str, user_id: str) -> bool:
    """Whether the user's stored vote on the post is out of the counts now: by its own mark, or by
    an applied suspension of the user (a pass moves a whole user with no mark per vote)."""
    with database.snapshot() as snapshot:
        holds = holds_of(snapshot, [user_id]).get(user_id, ())
    return stored_vote(database, post_id, user_id).is_out(holds)


def hours(database, post: str) -> dict[int, Counts]:
    since = datetime.fromtimestamp(HOUR - 3600, timezone.utc)
    return {int(h.hour.timestamp()): h.counts for h in hourly_counts(database, post, since) if not h.counts.is_zero()}


# --- the pure rules ---------------------------------------------------------------------------------


def test_a_pass_holds_each_counted_vote_a_suspension_covers_and_releases_each_held_one_no_longer_covered() -> None:
    votes = [
        StoredVote("p", "ring", UP, 100, "e", HOUR),  # covered by "since 50": held, out of its hour
        StoredVote("q", "ring", DOWN, 10, "e", HOUR + 3600),  # before the since: counts on
        StoredVote("r", "ring", NONE, 200, "e", HOUR),  # "none" counts nothing either way: left alone
        StoredVote("p", "freed", UP, 5, "e", HOUR, held_out=True),  # no suspension left: back in
        StoredVote("q", "still", UP, 5, "e", HOUR, held_out=True),
    ]  # still covered: stays held
    holds = {"ring": (Hold("s1", 50),), "still": (Hold("s2", None),)}
    moves = plan_moves(votes, holds, "@suspension/x")
    assert (moves.held, moves.released, moves.counts) == (1, 1, Counts())
    assert sorted(moves.marks, key=str) == sorted(
        [(user_hash("ring"), "ring", "p", True), (user_hash("freed"), "freed", "p", None)], key=str
    )
    (delta,) = moves.deltas  # both on post p, hour HOUR: -1 and +1, and the freed user a voter again
    assert (delta.post_id, delta.event_hour, delta.sums.counts, delta.sums.events) == ("p", HOUR, Counts(), 0)
    assert delta.sums.voters is not None


def test_the_sink_stores_a_covered_state_held_out_and_a_new_state_replacing_a_held_one_moves_nothing_out() -> None:
    key = PostUser("p", "ring")
    holds = {"ring": (Hold("s", None),)}
    suspended = plan_vote_changes({}, {key: state(UP, at(10))}, "@vote/x", holds)
    assert suspended.rows == [] and [row[-1] for row in suspended.marked_rows] == [True]
    assert suspended.deltas == []  # counts nothing, and adds no unique voter
    # Restored, the user flips: the held up counted nothing, so only the down moves, and the mark goes.
    stored = {key: StoredVote("p", "ring", UP, at(10), "e", HOUR, held_out=True)}
    flipped = plan_vote_changes(stored, {key: state(DOWN, at(20))}, "@vote/x", {})
    assert [row[-1] for row in flipped.marked_rows] == [None]
    assert [(d.event_hour, d.sums.counts) for d in flipped.deltas] == [(HOUR, Counts(downvotes=1))]


def test_a_users_pass_moves_each_vote_to_the_target_and_marks_the_holds_applied_instead_of_the_votes() -> None:
    since = datetime.fromtimestamp(50 / 1e6, timezone.utc)
    votes = [
        StoredVote("p", "ring", UP, 100, "e", HOUR),  # covered since 50: out, with no mark of its own
        StoredVote("q", "ring", DOWN, 10, "e", HOUR + 3600),  # before the since: counts on
        StoredVote("r", "ring", UP, 200, "e", HOUR, held_out=True),  # cast while suspended: stays marked
    ]
    rows = [UserSuspension("ring", "s1", since, None)]
    moves = plan_user_moves(votes, rows, None, "@suspension/x")
    assert (moves.held, moves.released, moves.counts, moves.marks) == (1, 0, Counts(upvotes=-1), [])
    assert moves.applied == ((user_hash("ring"), "ring", "s1", True),) and moves.restored == ()
    # Applied, the same rows move nothing and write nothing: a rerun is a no-op.
    applied = [UserSuspension("ring", "s1", since, None, applied=True)]
    assert not plan_user_moves(votes, applied, None, "@suspension/y").writes
    # Restored: the applied vote and the marked one are back in, the mark cleared, the row restored.
    back = plan_user_moves(votes, applied, "s1", "@suspension/z")
    assert (back.held, back.released, back.counts) == (0, 2, Counts(upvotes=2))
    assert back.marks == [(user_hash("ring"), "ring", "r", None)] and back.applied == ()
    assert [row[:3] + row[4:] for row in back.restored] == [(user_hash("ring"), "ring", "s1", None)]


def test_a_vote_by_vote_pass_marks_a_vote_an_applied_hold_keeps_out_without_moving_it() -> None:
    votes = [StoredVote("p", "big", UP, 100, "e", HOUR)]  # out by its user's applied hold
    moves = plan_moves(votes, {"big": (Hold("s", None, applied=True),)}, "@suspension/x")
    assert moves.marks == [(user_hash("big"), "big", "p", True)] and moves.deltas == [] and moves.votes == 0


def test_the_sink_takes_nothing_out_for_a_stored_vote_an_applied_hold_keeps_out() -> None:
    key = PostUser("p", "ring")
    stored = {key: StoredVote("p", "ring", UP, at(10), "e", HOUR)}  # no mark: out by the applied hold
    changes = plan_vote_changes(stored, {key: state(DOWN, at(20))}, "@vote/x", {"ring": (Hold("s", None, True),)})
    assert [row[-1] for row in changes.marked_rows] == [True] and changes.deltas == []


def test_users_passes_share_delta_rows_and_a_user_over_the_budget_moves_vote_by_vote() -> None:
    ring = [UserPlan(f"r{i}", 10, frozenset({("a", HOUR), ("b", HOUR)}), 4) for i in range(4)]
    loner = UserPlan("x", 10, frozenset({("z", HOUR)}), 4)
    big = UserPlan("big", 10, frozenset((f"p{i}", HOUR) for i in range(100)), 4)
    passes, alone = plan_user_passes([*ring, loner, big], max_rows=30, max_mutations=users_pass_cost(ring))
    assert alone == ["big"]
    assert ["r0", "r1", "r2"] in passes  # the ring's first three together (30 rows), in one range of posts
    assert sorted(user for group in passes for user in group) == ["r0", "r1", "r2", "r3", "x"]
    # Sharing: the four ring members in one pass cost two delta rows, not eight.
    assert users_pass_cost(ring) == users_pass_cost(ring[:1]) + 3 * 4


# --- suspend and restore ----------------------------------------------------------------------------


def test_a_suspension_holds_the_ring_out_of_every_count_and_hour_since_its_time_and_a_restore_puts_it_back(
    database,
) -> None:
    cast(
        database,
        {
            ("sa-1", "ring-a1"): (UP, at(60)),
            ("sa-1", "ring-a2"): (UP, at(3_700)),
            ("sa-2", "ring-a1"): (DOWN, at(3_800)),
            ("sa-2", "ring-a2"): (UP, at(30)),
            **{(post, f"honest-a{i}"): (UP, at(100 + i)) for post in ("sa-1", "sa-2") for i in range(3)},
        },
    )
    before = (counts(database, "sa-1", "sa-2"), hours(database, "sa-1"), hours(database, "sa-2"))
    assert before[0] == [Counts(upvotes=5), Counts(upvotes=4, downvotes=1)]

    since = datetime.fromtimestamp(HOUR + 1_000, timezone.utc)  # only the votes of the second hour
    result = suspend_users(database, "ring-a", ["ring-a2", "ring-a1"], "lockstep on sa-*", "t&s", since)
    assert (result.written, result.users, result.votes, result.counts, result.commits) == (
        True,
        2,
        2,
        Counts(upvotes=-1, downvotes=-1),
        1,
    )
    assert counts(database, "sa-1", "sa-2") == [Counts(upvotes=4), Counts(upvotes=4)]
    assert hours(database, "sa-1") == {HOUR: Counts(upvotes=4)}  # out of the vote's own hour
    assert hours(database, "sa-2") == {HOUR: Counts(upvotes=4)}
    assert counts_nothing(database, "sa-1", "ring-a2") and not counts_nothing(database, "sa-1", "ring-a1")
    assert not stored_vote(database, "sa-1", "ring-a2").held_out  # moved with its user: no mark of its own

    audit = requests_of(database, "ring-a")[SUSPEND]
    assert (audit.reason, audit.actor, audit.since, audit.user_ids, audit.votes, audit.counts, audit.commits) == (
        "lockstep on sa-*",
        "t&s",
        since,
        ("ring-a1", "ring-a2"),
        2,
        Counts(upvotes=-1, downvotes=-1),
        1,
    )
    assert audit.requested_at is not None and audit.finished_at is not None
    assert audit.finished_at >= audit.requested_at

    restored = restore_users(database, "ring-a", "appeal upheld", "t&s")
    assert (restored.written, restored.votes, restored.counts) == (True, 2, Counts(upvotes=1, downvotes=1))
    assert (counts(database, "sa-1", "sa-2"), hours(database, "sa-1"), hours(database, "sa-2")) == before
    (listed,) = [s for s in list_suspensions(database) if s.suspended.suspension_id == "ring-a"]
    assert listed.state == "restored" and listed.restored is not None and listed.restored.reason == "appeal upheld"


def test_a_vote_in_flight_through_the_sink_does_not_count_and_one_cast_while_suspended_counts_after_the_restore(
    stack, database
) -> None:
    """A ring member's vote published before the suspension, pulled into an open window of the
    vote-state sink (its DoFn holds it until the bundle finishes), applied after the suspension:
    it does not count. A vote cast while suspended counts once restored."""
    cast(database, {("sb-1", "honest-b"): (UP, at(10))})
    sink = ApplyVoteStatesFn(stack.project, stack.instance, stack.database, rows_per_commit=100)
    sink.setup()
    sink.start_bundle()
    in_flight = {PostUser("sb-1", "ring-b"): state(UP, at(20))}  # cast before the suspension
    assert list(sink.process((vote_shard("ring-b"), in_flight))) == []  # buffered, not applied yet

    suspend_users(database, "ring-b", ["ring-b"], "sockpuppet", "t&s")
    assert list(sink.finish_bundle()) == []  # applied now, after the suspension: nothing dead-lettered
    assert stored_vote(database, "sb-1", "ring-b").vote == UP and stored_vote(database, "sb-1", "ring-b").held_out
    assert counts(database, "sb-1") == [Counts(upvotes=1)]

    cast(database, {("sb-2", "ring-b"): (DOWN, at(30))})  # cast while suspended, on a post with no row yet
    assert counts(database, "sb-2") == [Counts()]
    result = restore_users(database, "ring-b", "cleared", "t&s")
    assert result.votes == 2 and counts(database, "sb-1", "sb-2") == [Counts(upvotes=2), Counts(downvotes=1)]


def test_the_sinks_held_suspensions_follow_every_suspension_and_restore_loading_once_per_change(database) -> None:
    """The suspensions the stream's sink holds (SuspendedUsers): each transaction reads only the
    UserSuspensionsChanged row; the first to find it changed reads its users' rows itself and the
    suspensions are loaded again, once; between changes none is loaded. Each state counts, or is
    held out, exactly as with its user's rows read in the transaction, through a suspension, a
    second suspension and a restore, and with too many rows to hold (max_rows=0: every
    transaction reads its users' rows)."""
    held = SuspendedUsers(database)
    unheld = SuspendedUsers(database, max_rows=0)

    def apply(loaded: SuspendedUsers, post: str, user: str, vote: str, seconds: int) -> None:
        run_with_retries(
            lambda: apply_vote_states(database, {PostUser(post, user): state(vote, at(seconds))}, suspended=loaded)
        )

    for loaded, post in ((held, "sc-1"), (unheld, "sc-2")):
        apply(loaded, post, "ring-c", UP, 10)
        apply(loaded, post, "honest-c", UP, 10)
    assert held.loads == 1 and counts(database, "sc-1", "sc-2") == [Counts(upvotes=2)] * 2

    suspend_users(database, "ring-c", ["ring-c", "ring-c2"], "ring", "t&s")
    for loaded, post in ((held, "sc-1"), (unheld, "sc-2")):
        apply(loaded, post, "ring-c2", UP, 20)  # cast while suspended: held out
        apply(loaded, post, "ring-c", DOWN, 30)  # replaces a held vote: moves nothing
        apply(loaded, post, "honest-c2", UP, 30)
    assert held.loads == 2
    assert counts(database, "sc-1", "sc-2") == [Counts(upvotes=2)] * 2
    assert all(stored_vote(database, post, "ring-c2").held_out for post in ("sc-1", "sc-2"))

    restore_users(database, "ring-c", "cleared", "t&s")
    for loaded, post in ((held, "sc-1"), (unheld, "sc-2")):
        apply(loaded, post, "ring-c2", DOWN, 40)  # counted again: up out, down in
    assert held.loads == 3
    assert counts(database, "sc-1", "sc-2") == [Counts(upvotes=2, downvotes=2)] * 2
    assert unheld.loads == 3 and not any(stored_vote(database, p, "ring-c2").held_out for p in ("sc-1", "sc-2"))


# A budget no pass of a whole ring member (6 votes on 6 posts) fits, and a vote-by-vote pass of 3 does.
VOTE_BY_VOTE_BUDGET = users_pass_cost([UserPlan("u", 6, frozenset((f"p{i}", HOUR) for i in range(6)), 0)]) - 1


@pytest.mark.parametrize(
    ("request_kind", "mode", "halfway", "rerun_votes", "commits"),
    [
        # Passes of whole users (one a pass here): the crash leaves two users moved, the rerun the third.
        (SUSPEND, "users", 6 * 4 - 12, 6, 3),
        (RESTORE, "users", 6 + 12, 6, 3),
        # Vote by vote (a user's pass breaks the budget): two passes of three votes, then the crash.
        (SUSPEND, "votes", 6 * 4 - 6, 12, 6),
        # A restore first marks the votes its user's applied row kept out (moving nothing), clears the
        # flag and restores the row in a commit of its own, then moves them back: the crash, at that
        # commit, leaves nothing moved; the rerun moves all 18.
        (RESTORE, "votes", 6, 18, 6),
    ],
)
def test_a_crash_between_passes_then_a_rerun_by_id_moves_nothing_twice(
    database, request_kind: str, mode: str, halfway: int, rerun_votes: int, commits: int
) -> None:
    posts = [f"sc-{request_kind}-{mode}-{i}" for i in range(6)]
    ring = [f"ring-c-{request_kind}-{mode}-{i}" for i in range(3)]
    cast(
        database,
        {
            **{(post, user): (UP, at(i)) for i, post in enumerate(posts) for user in ring},
            **{(post, "honest-c"): (UP, at(1)) for post in posts},
        },
    )
    suspension = f"ring-c-{request_kind}-{mode}"
    if request_kind == RESTORE:
        suspend_users(database, suspension, ring, "ring", "t&s")
    assert PASS_COST.of(StoredVote(post, "u", UP, 0, "", HOUR) for post in posts[:3]) <= VOTE_BY_VOTE_BUDGET
    rows_per_pass, budget = (6, MUTATION_BUDGET) if mode == "users" else (3, VOTE_BY_VOTE_BUDGET)

    def run(database) -> RequestResult:
        """The request of `request_kind`, on `database`."""
        if request_kind == SUSPEND:
            return suspend_users(
                database, suspension, ring, "ring", "t&s", rows_per_pass=rows_per_pass, max_mutations=budget
            )
        return restore_users(database, suspension, "cleared", "t&s", rows_per_pass=rows_per_pass, max_mutations=budget)

    def crash_on_the_third_transaction(transaction_number: int) -> None:
        if transaction_number == 3:
            raise RuntimeError("injected: the process died after two transactions committed")

    crashing = FlakyDatabase(database, before_transaction=crash_on_the_third_transaction)
    with pytest.raises(RuntimeError, match="injected"):
        run(crashing)
    assert sum(c.upvotes for c in counts(database, *posts)) == halfway
    assert requests_of(database, suspension)[request_kind].finished_at is None

    rerun = run(database)
    assert (rerun.written, rerun.votes) == (False, rerun_votes)  # the votes the crashed run had not moved
    again = run(database)
    assert (again.votes, again.commits) == (0, 0)
    audit = requests_of(database, suspension)[request_kind]
    assert (audit.votes, audit.commits) == (18, commits) and audit.finished_at is not None  # each vote moved once
    expected = Counts(upvotes=1) if request_kind == SUSPEND else Counts(upvotes=4)
    assert counts(database, *posts) == [expected] * 6


def test_a_user_found_too_large_in_its_pass_moves_vote_by_vote_and_the_rest_of_its_pass_after(
    database, monkeypatch
) -> None:
    """A user who grew since the snapshot (here: every user planned into one pass, whatever the
    budget) breaks the budget inside the pass: that user moves vote by vote, then the others'
    pass runs again without it. And a user whose votes an applied row keeps out but are not yet
    marked when its flags are to be cleared is marked in another round first. Each vote moves once."""
    posts = [f"sx-{i}" for i in range(6)]
    ring = ["ring-x-big", "ring-x-small"]
    cast(
        database,
        {**{(post, "ring-x-big"): (UP, at(i)) for i, post in enumerate(posts)}, ("sx-0", "ring-x-small"): (UP, at(9))},
    )
    monkeypatch.setattr(
        suspensions_module, "plan_user_passes", lambda plans, rows, budget: ([[plan.user_id for plan in plans]], [])
    )
    result = suspend_users(database, "ring-x", ring, "ring", "t&s", max_mutations=VOTE_BY_VOTE_BUDGET)
    assert (result.votes, counts(database, *posts)) == (7, [Counts()] * 6)

    restore_users(database, "ring-x", "cleared", "t&s", max_mutations=VOTE_BY_VOTE_BUDGET)
    assert counts(database, *posts) == [Counts(upvotes=2)] + [Counts(upvotes=1)] * 5

    suspend_users(database, "ring-x2", ["ring-x-big"], "ring", "t&s")  # whole: its row applied, no marks
    assert counts(database, *posts) == [Counts(upvotes=1)] + [Counts()] * 5
    real_round = suspensions_module._Passes._vote_by_vote
    rounds: list[str] = []

    def first_round_lost(self, user_id: str) -> None:  # as if the first round's marks were never made
        rounds.append(user_id)
        if len(rounds) > 1:
            real_round(self, user_id)

    monkeypatch.setattr(suspensions_module._Passes, "_vote_by_vote", first_round_lost)
    restored = restore_users(database, "ring-x2", "cleared", "t&s", max_mutations=VOTE_BY_VOTE_BUDGET)
    assert rounds == ["ring-x-big"] * 3  # the lost round, the round the flag's clearing waited for, the release
    assert restored.votes == 6 and counts(database, *posts) == [Counts(upvotes=2)] + [Counts(upvotes=1)] * 5


def test_a_record_stopped_between_its_commits_is_finished_by_the_rerun_before_anything_moves(
    database, monkeypatch
) -> None:
    """More users than one record commit holds (here 2 a commit): a crash after the first commit (the
    audit row and two users' rows) leaves the other users unrecorded and nothing moved; the rerun
    records them, then moves every vote once."""
    monkeypatch.setattr(suspensions_module, "USERS_PER_RECORD_COMMIT", 2)
    ring = [f"ring-r{i}" for i in range(5)]
    cast(database, {("sr-1", user): (UP, at(1)) for user in ring})
    crashing = FlakyDatabase(database, fail_commits={2}, error=RuntimeError)
    with pytest.raises(RuntimeError):
        suspend_users(crashing, "ring-r", ring, "ring", "t&s")
    assert counts(database, "sr-1") == [Counts(upvotes=5)]
    result = suspend_users(database, "ring-r", ring, "ring", "t&s")
    assert (result.written, result.votes) == (False, 5) and counts(database, "sr-1") == [Counts()]


def test_a_user_in_two_suspensions_counts_again_only_when_both_are_lifted_and_a_forgotten_user_stays_forgotten(
    database,
) -> None:
    cast(
        database,
        {("sd-1", "twice"): (UP, at(10)), ("sd-1", "forgotten"): (UP, at(10)), ("sd-1", "honest-d"): (UP, at(10))},
    )
    suspend_users(database, "ring-d1", ["twice", "forgotten"], "ring 1", "t&s")
    suspend_users(database, "ring-d2", ["twice"], "ring 2", "t&s")
    assert counts(database, "sd-1") == [Counts(upvotes=1)]
    forget_user(database, "erase-d", "forgotten", "erasure request", "dpo")
    assert restore_users(database, "ring-d1", "cleared", "t&s").votes == 0  # "twice" is still in ring-d2
    assert counts(database, "sd-1") == [Counts(upvotes=1)]
    assert stored_vote(database, "sd-1", "forgotten").vote == NONE
    assert restore_users(database, "ring-d2", "cleared", "t&s").votes == 1
    assert counts(database, "sd-1") == [Counts(upvotes=2)]
    assert [s.state for s in list_suspensions(database) if s.suspended.suspension_id.startswith("ring-d")] == [
        "restored",
        "restored",
    ]


def test_unique_voters_after_a_suspension_and_its_restore_are_those_of_neither(database) -> None:
    """A state applied while its user is suspended adds no voter; the restore adds the user back."""
    cast(database, {("su-1", f"honest-u{i}"): (UP, at(i)) for i in range(3)})
    suspend_users(database, "ring-u", ["ring-u1"], "ring", "t&s")
    cast(database, {("su-1", "ring-u1"): (UP, at(50))})
    (held,) = exact_counts(database, ["su-1"], unique=True)
    assert (held.counts, held.unique_voters) == (Counts(upvotes=3), 3)
    restore_users(database, "ring-u", "cleared", "t&s")
    (back,) = exact_counts(database, ["su-1"], unique=True)
    assert (back.counts, back.unique_voters) == (Counts(upvotes=4), 4)


def test_an_id_names_one_suspension_and_a_restore_needs_one(database) -> None:
    cast(database, {("si-1", "ring-i"): (UP, at(1))})
    suspend_users(database, "ring-i", ["ring-i"], "ring", "t&s")
    with pytest.raises(SuspensionIdInUse, match="ring-i"):
        suspend_users(database, "ring-i", ["ring-i", "another"], "ring", "t&s")
    with pytest.raises(UnknownSuspension, match="never-recorded"):
        restore_users(database, "never-recorded", "cleared", "t&s")
    restore_users(database, "ring-i", "cleared", "t&s")
    rerun = suspend_users(database, "ring-i", ["ring-i"], "ring", "t&s")  # lifted already: holds nothing again
    assert rerun.votes == 0 and counts(database, "si-1") == [Counts(upvotes=1)]


def test_the_cost_follows_the_suspended_votes_not_the_other_voters(database) -> None:
    """300 honest votes on the same posts; the suspension reads the ring's 8 Votes rows twice (its
    snapshot, its pass) and their suspension rows, the audit rows: never the honest ones."""
    posts = [f"sf-{i}" for i in range(4)]
    cast(
        database,
        {
            **{(post, f"crowd-{i}"): (UP, at(i)) for post in posts for i in range(75)},
            **{(post, user): (UP, at(1)) for post in posts for user in ("ring-f1", "ring-f2")},
        },
    )
    meter = ReadMeter(database)
    result = suspend_users(meter, "ring-f", ["ring-f1", "ring-f2"], "ring", "t&s")
    assert result.votes == 8 and meter.queries == 0
    assert meter.rows["Votes"] == 2 * 8 and meter.rows["UserSuspensions"] <= 3 * 2
    assert counts(database, *posts) == [Counts(upvotes=75)] * 4


# --- the commands -----------------------------------------------------------------------------------


def cli(stack, capsys, *args: str, status: int = 0) -> tuple[list[dict], str, str]:
    """The command's JSON lines, its stdout and its stderr."""
    assert (
        main(
            [args[0], "--project", stack.project, "--instance", stack.instance, "--database", stack.database, *args[1:]]
        )
        == status
    )
    captured = capsys.readouterr()
    return (
        [json.loads(line) for line in captured.out.splitlines() if line.startswith("{")],
        captured.out,
        captured.err,
    )


def test_the_commands_end_to_end(stack, database, capsys, tmp_path) -> None:
    cast(
        database,
        {("sg-1", "ring-g1"): (UP, at(1)), ("sg-1", "ring-g2"): (DOWN, at(2)), ("sg-1", "honest-g"): (UP, at(3))},
    )
    users = tmp_path / "ring.txt"
    users.write_text("# the ring\nring-g1\n\nring-g2\n", encoding="utf-8")
    (suspended,), _, err = cli(
        stack,
        capsys,
        "suspend-users",
        "--id",
        "case-g",
        "--reason",
        "lockstep",
        "--actor",
        "ts",
        "--users-file",
        str(users),
    )
    assert (
        suspended["suspension_id"],
        suspended["request"],
        suspended["users"],
        suspended["votes"],
        suspended["upvotes"],
        suspended["downvotes"],
        suspended["written_now"],
    ) == ("case-g", "suspend", 2, 2, -1, -1, True)
    assert "--id case-g" in err and counts(database, "sg-1") == [Counts(upvotes=1)]
    (rerun,), _, _ = cli(
        stack, capsys, "suspend-users", "--id", "case-g", "--reason", "lockstep", "--actor", "ts", "ring-g1", "ring-g2"
    )
    assert (rerun["written_now"], rerun["moved_now"], rerun["votes"]) == (False, 0, 2)

    listed, _, _ = cli(stack, capsys, "suspensions", "--json")
    (case,) = [s for s in listed if s["suspension_id"] == "case-g"]
    assert (case["state"], case["users"], case["suspended"]["votes"], case["restored"]) == (
        "active",
        ["ring-g1", "ring-g2"],
        2,
        None,
    )
    _, text, _ = cli(stack, capsys, "suspensions")
    assert "case-g  active     2 users, every vote: 1 upvotes and 1 downvotes held out (2 votes)" in text

    (restored,), _, _ = cli(stack, capsys, "restore-users", "--id", "case-g", "--reason", "appeal", "--actor", "ts")
    assert (restored["request"], restored["users"], restored["votes"], restored["upvotes"]) == ("restore", 2, 2, 1)
    assert counts(database, "sg-1") == [Counts(upvotes=2, downvotes=1)]
    listed, _, _ = cli(stack, capsys, "suspensions", "--json")
    (case,) = [s for s in listed if s["suspension_id"] == "case-g"]
    assert case["state"] == "restored" and case["restored"]["reason"] == "appeal"

    _, _, err = cli(stack, capsys, "restore-users", "--id", "no-such-case", status=2)
    assert "no suspension was recorded under ID 'no-such-case'" in err
    _, _, err = cli(stack, capsys, "suspend-users", "--id", "case-h", "--reason", "x", status=2)
    assert "name at least one user" in err
