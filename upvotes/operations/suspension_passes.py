"""Moving suspended users' stored votes out of the counts, and back in (issue 46): the passes of
`upvotes suspend-users` and `upvotes restore-users`, each one read-write transaction
(upvotes/operations/suspensions.py records the requests and drives the passes).

What a stored vote contributes to the counts is `counted(vote)`, or nothing while it is held out:
its Votes row marked HeldOut, or an applied UserSuspensions row of its user covering it
(schemas/vote_states.py `held_out`). Every writer keeps that true in the transaction that changes
a row: the vote-state sink (spanner_writes/votes.py) takes out what the stored state contributes
and puts in what the new one does, marking it when an active suspension of the user covers it;
a pass here changes marks and applied flags, and moves the counts they stand for in the same
commit. So the counts are always the sum of what the stored states contribute, whatever runs
beside, and a request is exact once its users' votes agree with their active suspensions.

The users' pass (`reconcile_users`), for a group of whole users:

1. reads, in the transaction, the users' UserSuspensions rows and every Votes row of theirs (one
   key range per user: a range read costs the emulator a fifth of a read by key), the columns a
   move needs;
2. plans (`plan_user_moves`, pure): the target is the users' active suspensions (less the one
   being restored); a vote the target covers and that counts now is HELD (its count out of its
   own event hour), a vote out now that the target does not cover is RELEASED (back in, its user a
   unique voter of that hour again: a state applied while held added none, and its mark cleared);
   every target suspension of the user is then marked applied, and the restored one gets its
   RestoredAt (the commit timestamp) and loses its flag. So a ring's votes move with no write per
   vote: one UserSuspensions row per user, and the marks of the few votes cast while suspended;
3. writes those rows, the delta rows the moves add up to, one per post and event hour, DeltaId
   "@suspension/<commit id>", through spanner_writes.deltas.add_delta_writes (so with the commit's
   DeltaCommits and TopCandidates rows: the fold, the exact and hourly reads and the certified
   tops treat them as any delta), the UserSuspensionsChanged row (the sinks' held suspensions are
   out of date), and adds up what it moved in the request's audit row (Suspensions: Votes, the
   counters, Commits).

A user whose pass alone would break the mutation budget (votes on thousands of posts and hours)
moves vote by vote instead (`reconcile`, passes of some of the user's votes, read by key): each
vote the user's active suspensions cover is marked and moved out, each no longer covered is
unmarked and moved in, and a vote an applied row covers is marked with no move (it counts nothing
either way); then `unapply` clears the user's applied flags (and sets a restore's RestoredAt) in
a commit of its own, which moves nothing once every such vote is marked.

Why it is exact at every crash point: the marks, the flags and the counts they stand for change in
one commit, so a pass killed before its commit moved nothing, and one run again (a rerun by ID, a
retry after an ambiguous commit) reads what the first wrote and moves nothing twice; the audit
row's tallies change in the same commit, so they count each move once too. Two passes, or a pass
and the sink, on the same user are serialised by Spanner on the Votes rows both read and write
and on the UserSuspensionsChanged row (the emulator aborts one, which is retried and re-reads).

Cost: only the suspended users' rows (never the catalogue nor the other voters of the same posts),
one delta row per post and hour a pass moves (the driver groups users whose votes share posts),
and no parent Posts row unless one is missing (a vote held out by the sink since its post's first
vote: its post may have no row; the commit fails NOT_FOUND, writing nothing, and is made again
upserting its parents).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple, TypeVar

from google.api_core import exceptions
from google.cloud import spanner

from schemas import post_hash, user_hash
from schemas.counters import COUNTER_OF_VOTE, Counts, total
from schemas.delta_ids import suspension_delta_id
from schemas.records import CounterSums, PostDelta, PostUser
from schemas.vote_states import Hold, held
from schemas.voter_sketch import sketch_of
from spanner_store import mutations
from spanner_store.commit_budget import CommitCost, Shared, cut_within_budget
from spanner_store.database import MUTATION_BUDGET, is_transient, read_rows, run_transaction, schema_behind
from spanner_store.delta_commits import new_commit_id
from spanner_store.key_sets import KeySet
from spanner_store.mutation_cost import update_cost
from spanner_store.suspended_users import MARK_CHANGED_COST, mark_changed
from spanner_store.tables import (
    COUNTER_COLUMNS,
    SUSPENSION_TALLY_COLUMNS,
    SUSPENSIONS,
    USER_SUSPENSION_APPLY_COLUMNS,
    USER_SUSPENSION_RESTORE_COLUMNS,
    USER_SUSPENSIONS,
    VOTE_MARK_COLUMNS,
    VOTES,
    counts_at,
    user_rows_range,
    vote_key,
)
from spanner_store.vote_rows import StoredVote, UserSuspension, holds_of, suspensions_of, votes_to_move
from spanner_writes.deltas import (
    DELTA_COMMIT_COST,
    MUTATIONS_PER_COMMIT,
    MUTATIONS_PER_DELTA,
    MUTATIONS_PER_PARENT,
    add_delta_writes,
)

# A vote's mark written: its key and HeldOut (Votes has no index).
MUTATIONS_PER_MARK = update_cost(VOTES, VOTE_MARK_COLUMNS)
# A user's suspension row marked applied, or restored (and no longer applied).
MUTATIONS_PER_APPLY = update_cost(USER_SUSPENSIONS, USER_SUSPENSION_APPLY_COLUMNS)
MUTATIONS_PER_RESTORE = update_cost(USER_SUSPENSIONS, USER_SUSPENSION_RESTORE_COLUMNS)
# The request's audit row, its tallies updated in every pass that moves a vote.
MUTATIONS_PER_TALLY = update_cost(SUSPENSIONS, SUSPENSION_TALLY_COLUMNS)
# The stored votes one vote-by-vote pass reads by key and may move, at most: on the emulator, 2,000
# a pass moved 15-40% more votes a second than 4,000 (50,000 votes, two rounds each, load average 6-9).
DEFAULT_ROWS_PER_PASS = 2_000
# The Votes rows one users' pass reads, at most (a user with more is a pass alone): the emulator
# runs one read-write transaction at a time, and a pass holds it while the command decodes the rows,
# so under a stream's load a large pass is aborted and made again. Measured (100,000 ring votes,
# `upvotes stream` applying 500 vote states a second, 2 cores): passes of 20,000 rows suspended in
# 47.8 s and restored in 33.5 s, of 4,000 in 15.4 and 18.3 s, of 2,000 in 17.0 and 15.6 s.
DEFAULT_USER_ROWS_PER_PASS = 4_000


class Moves(NamedTuple):
    """What one pass does (plan_moves, plan_user_moves)."""

    marks: list[tuple]  # Votes updates (VOTE_MARK_COLUMNS): each changed row's new HeldOut
    deltas: list[PostDelta]  # the counts the moves add up to, one row per post and event hour
    held: int  # votes moved out of the counts
    released: int  # votes moved back in
    counts: Counts  # the change they make, summed over posts (negative for votes held)
    applied: tuple[tuple, ...] = ()  # UserSuspensions updates (USER_SUSPENSION_APPLY_COLUMNS)
    restored: tuple[tuple, ...] = ()  # UserSuspensions updates (USER_SUSPENSION_RESTORE_COLUMNS)

    @property
    def votes(self) -> int:
        return self.held + self.released

    @property
    def writes(self) -> bool:
        """Whether the pass has anything to write (a mark, a flag, a move)."""
        return bool(self.marks or self.deltas or self.applied or self.restored)


def should_hold(vote: StoredVote, holds: Mapping[str, Iterable[Hold]]) -> bool:
    """Whether the user's active suspensions hold this stored vote out of the counts. Pure."""
    return vote.user_id in holds and held(vote.vote, vote.voted_at_us, holds[vote.user_id])


def needs_times(holds: Mapping[str, Iterable[Hold]]) -> bool:
    """Whether deciding which votes these suspensions hold needs the votes' times (one holds out
    the votes since a time; the others hold every vote). Pure."""
    return any(hold.since_us is not None for user_holds in holds.values() for hold in user_holds)


def rows_need_times(suspensions: Iterable[UserSuspension]) -> bool:
    """Whether an active one of these suspension rows holds out the votes since a time (so moving
    the users' votes needs the votes' times). Pure."""
    return any(row.since is not None for row in suspensions if row.restored_at is None)


def needs_move(vote: StoredVote, holds: Mapping[str, Iterable[Hold]]) -> bool:
    """Whether a vote-by-vote pass changes this row: its mark, or what it contributes, disagrees
    with the user's active suspensions. Pure."""
    hold = should_hold(vote, holds)
    return vote.held_out != hold or vote.is_out(holds.get(vote.user_id, ())) != hold


def _sum_moves(moved: Iterable[tuple[StoredVote, bool]], delta_id: str) -> tuple[list[PostDelta], int, int, Counts]:
    """The delta rows of votes moved out (True) or back in (False): one per post and event hour, a
    released vote's user a unique voter of its hour again. Pure."""
    tallies: dict[tuple[str, int], dict[str, int]] = {}  # per hour, per vote: +1 in, -1 out
    voters: dict[tuple[str, int], set[str]] = {}
    held_votes = released = 0
    for vote, out in moved:
        hour = (vote.post_id, vote.event_hour)
        by_vote = tallies.setdefault(hour, {})
        by_vote[vote.vote] = by_vote.get(vote.vote, 0) + (-1 if out else 1)
        if out:
            held_votes += 1
        else:
            released += 1
            voters.setdefault(hour, set()).add(vote.user_id)
    sums = {
        hour: Counts(**{COUNTER_OF_VOTE[vote]: n for vote, n in by_vote.items() if vote in COUNTER_OF_VOTE})
        for hour, by_vote in tallies.items()
    }
    deltas = [
        PostDelta(
            post_id,
            hour,
            delta_id,
            CounterSums(
                sums[(post_id, hour)], 0, sketch_of(voters[(post_id, hour)]) if (post_id, hour) in voters else None
            ),
        )
        for post_id, hour in sorted(sums)
    ]
    return deltas, held_votes, released, total(sums.values())


def plan_moves(votes: Iterable[StoredVote], holds: Mapping[str, Iterable[Hold]], delta_id: str) -> Moves:
    """A vote-by-vote pass: each stored vote's mark is set to whether its user's active suspensions
    (`holds`, by user, applied or not) cover it; a vote that counted and is now marked is held (its
    count out of its own event hour), one that was out and is no longer covered is released (back
    in, its user a unique voter of that hour again: a state applied while held added none); a vote
    an applied hold kept out is marked with no move. Every other row is left alone. Pure."""
    marks: list[tuple] = []
    moved: list[tuple[StoredVote, bool]] = []
    for vote in votes:
        hold = should_hold(vote, holds)
        if vote.held_out != hold:
            marks.append(vote_key(vote.post_id, vote.user_id) + (True if hold else None,))
        if vote.is_out(holds.get(vote.user_id, ())) != hold:
            moved.append((vote, hold))
    return Moves(marks, *_sum_moves(moved, delta_id))


class _Targets(NamedTuple):
    """What a users' pass moves some users' votes to (plan_user_moves): their holds now, the target
    ones (the active suspensions less the one being restored), and their active rows."""

    now: dict[str, list[Hold]]
    target: dict[str, list[Hold]]
    active: list[UserSuspension]
    restoring: str | None

    @classmethod
    def of(cls, suspensions: Iterable[UserSuspension], restoring: str | None) -> _Targets:
        active = [row for row in suspensions if row.restored_at is None]
        now: dict[str, list[Hold]] = {}
        target: dict[str, list[Hold]] = {}
        for row in active:
            now.setdefault(row.user_id, []).append(row.hold)
            if row.suspension_id != restoring:
                target.setdefault(row.user_id, []).append(row.hold)
        return cls(now, target, active, restoring)

    def decide(self, vote: StoredVote) -> tuple[bool, bool, bool]:
        """(whether its mark is cleared, whether it moves, whether it is out after the pass)."""
        hold = should_hold(vote, self.target)
        return vote.held_out and not hold, vote.is_out(self.now.get(vote.user_id, ())) != hold, hold

    def flag_writes(self) -> tuple[tuple[tuple, ...], tuple[tuple, ...]]:
        """The UserSuspensions updates: each target row marked applied, the restored one restored."""
        applied = tuple(
            _suspension_key(row) + (True,)
            for row in self.active
            if row.suspension_id != self.restoring and not row.applied
        )
        return applied, _restored_rows(self.active, self.restoring)


def plan_user_moves(
    votes: Iterable[StoredVote], suspensions: Iterable[UserSuspension], restoring: str | None, delta_id: str
) -> Moves:
    """A users' pass (module docstring): `votes` are every stored vote of some users, `suspensions`
    every UserSuspensions row of theirs, `restoring` the suspension being lifted (None: a
    suspension's pass). Each vote is moved to what the users' target suspensions (the active ones,
    less `restoring`) say, each target row is marked applied, and `restoring`'s row restored. Pure."""
    targets = _Targets.of(suspensions, restoring)
    marks: list[tuple] = []
    moved: list[tuple[StoredVote, bool]] = []
    for vote in votes:
        clear, move, out = targets.decide(vote)
        if clear:
            marks.append(vote_key(vote.post_id, vote.user_id) + (None,))
        if move:
            moved.append((vote, out))
    return Moves(marks, *_sum_moves(moved, delta_id), *targets.flag_writes())


def _suspension_key(row: UserSuspension) -> tuple:
    return (user_hash(row.user_id), row.user_id, row.suspension_id)


def _restored_rows(active: Iterable[UserSuspension], restoring: str | None) -> tuple[tuple, ...]:
    """The UserSuspensions updates restoring `restoring`'s active rows: RestoredAt the commit's
    timestamp, and no longer applied."""
    return tuple(
        _suspension_key(row) + (spanner.COMMIT_TIMESTAMP, None) for row in active if row.suspension_id == restoring
    )


def moves_cost(moves: Moves, tallied: bool = True) -> int:
    """Mutations one pass's writes cost: the marks and flags, a delta commit (parents included), the
    tally, and the UserSuspensionsChanged row when flags change."""
    flags = len(moves.applied) * MUTATIONS_PER_APPLY + len(moves.restored) * MUTATIONS_PER_RESTORE
    return (
        len(moves.marks) * MUTATIONS_PER_MARK
        + flags
        + (MARK_CHANGED_COST if flags else 0)
        + (DELTA_COMMIT_COST.of(moves.deltas) if moves.deltas else 0)
        + (MUTATIONS_PER_TALLY if tallied else 0)
    )


def _post_hour(vote: StoredVote) -> tuple[str, int]:
    return vote.post_id, vote.event_hour


# A vote-by-vote pass as planned: its log rows and tally, every row's mark, and a delta row per post
# and hour (no parent rows: the posts of votes that counted exist; `run_pass` writes them if not).
PASS_COST: CommitCost[StoredVote] = CommitCost(
    MUTATIONS_PER_COMMIT + MUTATIONS_PER_TALLY, MUTATIONS_PER_MARK, (Shared(_post_hour, MUTATIONS_PER_DELTA),)
)
# What a users' pass costs beyond its delta rows and marks: its log rows, tally and the changed row.
USERS_PASS_FIXED_COST = MUTATIONS_PER_COMMIT + MUTATIONS_PER_TALLY + MARK_CHANGED_COST


def plan_passes(
    votes: Iterable[StoredVote], max_rows: int = DEFAULT_ROWS_PER_PASS, max_mutations: int = MUTATION_BUDGET
) -> list[list[StoredVote]]:
    """The votes of a vote-by-vote move cut into passes of at most `max_rows` rows and
    `max_mutations` mutations (PASS_COST), in the order of their posts' delta rows (post hash, post,
    hour): the votes of many users on the same post and hour share one delta row, and each pass
    writes one contiguous range of posts. Pure."""
    ordered = sorted(votes, key=lambda v: (post_hash(v.post_id), v.post_id, v.event_hour, v.user_id))
    return cut_within_budget(ordered, PASS_COST, max_rows, max_mutations, "stored vote")


class UserPlan(NamedTuple):
    """One user's share of a users' pass, as a snapshot found it (plan_user_passes)."""

    user_id: str
    rows: int  # Votes rows the pass reads
    hours: frozenset[tuple[str, int]]  # the posts and hours its moves write delta rows in
    writes: int  # mutations of its own: marks and flags


def plan_users(
    votes: Iterable[StoredVote], suspensions: Iterable[UserSuspension], restoring: str | None
) -> list[UserPlan]:
    """Each user with something for a users' pass to do (a vote to move or unmark, a row to
    restore), and its share of the pass, as `plan_user_moves` would plan it. Pure."""
    targets = _Targets.of(suspensions, restoring)
    rows: dict[str, int] = {}
    hours: dict[str, set[tuple[str, int]]] = {}
    clears: dict[str, int] = {}
    for vote in votes:
        user = vote.user_id
        rows[user] = rows.get(user, 0) + 1
        clear, move, _ = targets.decide(vote)
        if clear:
            clears[user] = clears.get(user, 0) + 1
        if move:
            hours.setdefault(user, set()).add((vote.post_id, vote.event_hour))
    applied, restored = targets.flag_writes()
    flags: dict[str, int] = {}
    for written, cost in ((applied, MUTATIONS_PER_APPLY), (restored, MUTATIONS_PER_RESTORE)):
        for key in written:
            flags[key[1]] = flags.get(key[1], 0) + cost
    return [
        UserPlan(
            user,
            rows.get(user, 0),
            frozenset(hours.get(user, ())),
            clears.get(user, 0) * MUTATIONS_PER_MARK + flags.get(user, 0),
        )
        for user in sorted(hours.keys() | clears.keys() | {key[1] for key in restored})
    ]


def users_pass_cost(users: Iterable[UserPlan]) -> int:
    """Mutations a users' pass of these users costs, as planned (parents taken as present). Pure."""
    users = list(users)
    hours = set().union(*(user.hours for user in users)) if users else set()
    return USERS_PASS_FIXED_COST + sum(user.writes for user in users) + len(hours) * MUTATIONS_PER_DELTA


def plan_user_passes(
    users: Iterable[UserPlan], max_rows: int = DEFAULT_USER_ROWS_PER_PASS, max_mutations: int = MUTATION_BUDGET
) -> tuple[list[list[str]], list[str]]:
    """Users cut into passes of at most `max_rows` Votes rows (a user with more is a pass alone)
    and `max_mutations` mutations, in the order of their first post and hour, so the users of a
    ring, who vote on the same posts, share delta rows; and the users whose pass alone would break
    the budget, to be moved vote by vote. Pure."""
    passes: list[list[str]] = []
    alone: list[str] = []
    current: list[UserPlan] = []
    hours: set[tuple[str, int]] = set()
    rows = writes = 0

    def first_hour(user: UserPlan) -> tuple:
        return min(((post_hash(post), post, hour) for post, hour in user.hours), default=(0, "", 0)), user.user_id

    for user in sorted(users, key=first_hour):
        if users_pass_cost([user]) > max_mutations:
            alone.append(user.user_id)
            continue
        joined = hours | user.hours
        cost = USERS_PASS_FIXED_COST + writes + user.writes + len(joined) * MUTATIONS_PER_DELTA
        if current and (rows + user.rows > max_rows or cost > max_mutations):
            passes.append([u.user_id for u in current])
            current, hours, rows, writes = [], set(), 0, 0
            joined = set(user.hours)
        current.append(user)
        hours, rows, writes = joined, rows + user.rows, writes + user.writes
    if current:
        passes.append([u.user_id for u in current])
    return passes, alone


class Tally(NamedTuple):
    """The audit row a pass adds its moves up in (Suspensions, keyed by these two)."""

    suspension_id: str
    request: str


def _add_to_tally(transaction, tally: Tally, moves: Moves) -> None:
    key = [tally.suspension_id, tally.request]
    rows = list(transaction.read(SUSPENSIONS, columns=SUSPENSION_TALLY_COLUMNS, keyset=KeySet(keys=[key])))
    if not rows:
        raise LookupError(f"no audit row {key} to add a pass to (was it deleted?)")
    row = rows[0]
    counts = counts_at(row, 3).plus(moves.counts)
    commits = row[3 + len(COUNTER_COLUMNS)] + 1
    mutations.update(
        transaction, SUSPENSIONS, SUSPENSION_TALLY_COLUMNS, [(*key, row[2] + moves.votes, *counts, commits)]
    )


class _OverBudget(Exception):
    """A pass whose writes, once the rows are read, cost more than the budget."""


def _write(transaction, moves: Moves, tally: Tally | None, max_mutations: int, parents_present: bool) -> Moves:
    """A planned pass's writes, within `max_mutations` (else _OverBudget, having written nothing)."""
    if not moves.writes:
        return moves
    present = {delta.post_id for delta in moves.deltas} if parents_present else set()
    tallied = tally is not None and moves.votes > 0
    if moves_cost(moves, tallied) - len(present) * MUTATIONS_PER_PARENT > max_mutations:
        raise _OverBudget()
    if moves.marks:
        mutations.update(transaction, VOTES, VOTE_MARK_COLUMNS, moves.marks)  # raw protobufs, as the sink's
    if moves.applied:
        mutations.update(transaction, USER_SUSPENSIONS, USER_SUSPENSION_APPLY_COLUMNS, list(moves.applied))
    if moves.restored:
        mutations.update(transaction, USER_SUSPENSIONS, USER_SUSPENSION_RESTORE_COLUMNS, list(moves.restored))
    if moves.applied or moves.restored:
        mark_changed(transaction)  # the sinks' held suspensions are out of date from this commit on
    if moves.deltas:
        add_delta_writes(transaction, moves.deltas, present)
    if tallied:
        assert tally is not None
        _add_to_tally(transaction, tally, moves)
    return moves


def reconcile(
    transaction,
    keys: Iterable[PostUser],
    tally: Tally | None,
    max_mutations: int = MUTATION_BUDGET,
    parents_present: bool = True,
) -> Moves:
    """A vote-by-vote pass inside a read-write transaction: read the rows (by key) and the users'
    active suspensions, plan (plan_moves), write and add up in `tally` (see the module docstring).
    With `parents_present`, the moved posts' Posts keys are not upserted. Raises _OverBudget,
    having written nothing, when the writes would cost more than `max_mutations`."""
    ordered = sorted({vote_key(key.post_id, key.user_id) for key in keys})  # in key order: read faster
    holds = holds_of(transaction, {key[1] for key in ordered})
    stored = list(votes_to_move(transaction, KeySet(keys=[list(key) for key in ordered]), needs_times(holds)))
    return _write(
        transaction,
        plan_moves(stored, holds, suspension_delta_id(new_commit_id())),
        tally,
        max_mutations,
        parents_present,
    )


def reconcile_users(
    transaction,
    user_ids: Sequence[str],
    tally: Tally | None,
    restoring: str | None,
    max_mutations: int = MUTATION_BUDGET,
    parents_present: bool = True,
) -> Moves:
    """A users' pass inside a read-write transaction: read the users' suspension rows and every
    Votes row of theirs, plan (plan_user_moves), write and add up in `tally` (module docstring).
    Raises _OverBudget, having written nothing, when the writes would cost more than `max_mutations`."""
    suspensions = suspensions_of(transaction, user_ids)
    with_times = rows_need_times(suspensions)
    votes = read_rows(
        lambda retry: list(votes_to_move(transaction, user_rows_range(*sorted(user_ids)), with_times, retry))
    )
    moves = plan_user_moves(votes, suspensions, restoring, suspension_delta_id(new_commit_id()))
    return _write(transaction, moves, tally, max_mutations, parents_present)


class NotYetMarked(Exception):
    """`unapply` found a vote an applied suspension keeps out that has no mark of its own."""


def unapply(transaction, user_id: str, restoring: str | None) -> Moves:
    """Clears a user's applied flags (and restores `restoring`'s row) in a commit that moves
    nothing: every counted vote an applied row covers must be marked already (the vote-by-vote
    passes mark them), else NotYetMarked, having written nothing."""
    suspensions = suspensions_of(transaction, [user_id])
    with_times = rows_need_times(suspensions)
    active = [row for row in suspensions if row.restored_at is None]
    applied = [row.hold for row in active if row.applied]
    votes = read_rows(lambda retry: list(votes_to_move(transaction, user_rows_range(user_id), with_times, retry)))
    if any(not vote.held_out and held(vote.vote, vote.voted_at_us, applied) for vote in votes):
        raise NotYetMarked(user_id)
    cleared = tuple(_suspension_key(row) + (None,) for row in active if row.applied and row.suspension_id != restoring)
    restored = _restored_rows(active, restoring)
    return _write(transaction, Moves([], [], 0, 0, Counts(), cleared, restored), None, MUTATION_BUDGET, True)


_T = TypeVar("_T")


def run_pass(
    database,
    make: Callable[[object, bool], Moves],
    parts: Sequence[_T],
    again: Callable[[Sequence[_T]], list[Moves]],
) -> list[Moves]:
    """One pass (`make(transaction, parents_present)`), one read-write transaction per attempt; an
    abort or another transient error surfaces for run_with_retries, and a retry re-reads. A pass
    whose posts lack a Posts row is made again upserting them; one whose writes would then break
    the budget is made in two halves of its `parts` (`again`), each its own transaction (a retry of
    the whole finds the first half's moves). Returns the moves of each transaction that committed."""

    def attempt(parents_present: bool) -> list[Moves]:
        try:
            return [run_transaction(database, lambda transaction: make(transaction, parents_present))]
        except _OverBudget:
            if len(parts) == 1:
                raise
            half = len(parts) // 2
            return again(parts[:half]) + again(parts[half:])

    try:
        return attempt(parents_present=True)
    except exceptions.NotFound as error:
        if schema_behind(error) or is_transient(error):
            raise
        return attempt(parents_present=False)  # a post with no Posts row yet: upsert the parents


def reconcile_votes(
    database, keys: list[PostUser], tally: Tally | None, max_mutations: int = MUTATION_BUDGET
) -> list[Moves]:
    """A vote-by-vote pass (of plan_passes), as `run_pass` makes it."""
    try:
        return run_pass(
            database,
            lambda transaction, present: reconcile(transaction, keys, tally, max_mutations, present),
            keys,
            lambda part: reconcile_votes(database, list(part), tally, max_mutations),
        )
    except _OverBudget:
        raise ValueError("one stored vote cannot exceed the mutation budget") from None


class UserTooLarge(Exception):
    """One user's pass breaks the budget: move the user vote by vote."""


def reconcile_user_group(
    database, user_ids: Sequence[str], tally: Tally | None, restoring: str | None, max_mutations: int = MUTATION_BUDGET
) -> list[Moves]:
    """A users' pass (of plan_user_passes), as `run_pass` makes it. Raises UserTooLarge (naming the
    user) when one user's pass alone breaks the budget."""
    try:
        return run_pass(
            database,
            lambda transaction, present: reconcile_users(
                transaction, user_ids, tally, restoring, max_mutations, present
            ),
            user_ids,
            lambda part: reconcile_user_group(database, part, tally, restoring, max_mutations),
        )
    except _OverBudget:
        raise UserTooLarge(user_ids[0]) from None
