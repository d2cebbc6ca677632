"""Suspensions (issue 46): a ring of accounts' votes held out of every count, retroactively and
exactly (`upvotes suspend-users`), and counted again (`upvotes restore-users`), audited
(`upvotes suspensions`).

What counts. Only vote-state votes can be suspended: the Votes table keeps each user's latest
state per post, so a user's votes can be found and taken out one by one. Delta events carry no
user (a delta row sums many users' votes), so nothing can take one user's out of them: send vote
states where abuse matters (docs/contract.md). A user's stored vote contributes `counted(vote)`,
or nothing while an active suspension of the user covers it (cast at or after its Since; every
vote when it has none): every count follows from that, in the vote's own event hour, so the
totals, the hourly counts, the hot score and both trending tops, and the all-time top.

One request, one ID (the operator's --id). A suspension:

1. records itself BEFORE any count moves: its audit row (Suspensions, Request "suspend": who, why,
   since when, the users, RequestedAt the commit timestamp) and, in the same commit and as many
   more as the mutation budget needs, one UserSuspensions row per user. From that commit on,
   every transaction that applies one of those users' states (the stream's sink, a dead-letter
   replay, `forget-user`) reads it, so a vote in flight (an open window, the backlog, a dead
   letter) or cast while suspended is stored held out, counting nothing;
2. reads, in a strong snapshot taken after the record, the users' Votes rows (one key range per
   user) and their suspension rows, finds the users with a vote to move, and moves them in passes
   (upvotes/operations/suspension_passes.py): each pass one read-write transaction over whole
   users (those whose votes share posts together, so they share delta rows) that re-reads their
   rows, moves each covered vote's count out of its own event hour, marks the user's suspension
   rows applied (one write per user, none per vote) and adds what it moved to the audit row; a
   user too large for one commit moves vote by vote, each vote marked;
3. stamps the audit row's FinishedAt.

A restore records its own audit row (Request "restore"), then runs the same passes with that
suspension lifted: each user's pass sets RestoredAt on the user's row of it, in the commit that
moves back every vote no other active suspension of the user covers, the user's latest state, the
ones cast while suspended included (the sink stores those marked until then). A user in two
suspensions counts again only when both are lifted; a forgotten user (`forget-user`) stays
forgotten: the erasure turned the user's votes to "none", which count nothing held or not.

Exact, and idempotent by ID: a pass moves votes and the marks and flags that say they moved in one
commit, and a user whose votes already agree is not moved, so a request killed anywhere and run
again (same --id) moves each vote once: the rerun finds its audit row, writes the user rows still
missing, and its passes find what the first run wrote. Its audit row's tallies are added in each
pass's commit, so they count each move once too. Suspend then restore leaves every count, hour and
ranking as with neither; the fold, the exact reads and the certified tops see ordinary delta rows.

Unique voters (HyperLogLog sketches, schemas/voter_sketch.py) cannot forget a user: a suspended
user already recorded as a post's voter stays recorded (rebuilding a post's sketch would need every
voter of the post, which nothing keyed by post holds: the Votes key leads with the user, and delta
events' voters live only in the sketches). A state applied while its user is suspended adds no
voter, and a restore adds each user whose vote it moves back in again, in the vote's hour; so after
suspend and restore the estimate equals neither's, except for a user whose only vote on a post was
cast while suspended and later taken back to "none" (the sketch never saw it).

Cost: recording, one commit per 4,996 users (4 mutations a user); the passes read the suspended
users' Votes rows twice (the snapshot, then each pass's range reads) and write one suspension row
per user, a mark per vote cast while suspended (restore), and one delta row per post and event hour
a pass moves (22 mutations): the suspended votes, never the catalogue nor the honest votes
(bench/suspensions.py measures it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import NamedTuple

from google.api_core import exceptions
from google.cloud import spanner

from schemas import user_hash
from schemas.counters import Counts
from schemas.records import PostUser
from spanner_store.database import MUTATION_BUDGET, RetryPolicy, commit_mutations, run_transaction, run_with_retries
from spanner_store.key_sets import KeySet
from spanner_store.mutation_cost import insert_cost
from spanner_store.suspended_users import MARK_CHANGED_COST, mark_changed
from spanner_store.tables import (
    COUNTER_COLUMNS,
    SUSPENSION_COLUMNS,
    SUSPENSION_FINISH_COLUMNS,
    SUSPENSIONS,
    USER_SUSPENSION_RECORD_COLUMNS,
    USER_SUSPENSIONS,
    counts_at,
    user_rows_range,
)
from spanner_store.vote_rows import holds_of, suspensions_of, votes_to_move
from upvotes.operations.suspension_passes import (
    DEFAULT_ROWS_PER_PASS,
    DEFAULT_USER_ROWS_PER_PASS,
    Moves,
    NotYetMarked,
    Tally,
    UserTooLarge,
    needs_move,
    needs_times,
    plan_passes,
    plan_user_passes,
    plan_users,
    reconcile_user_group,
    reconcile_votes,
    rows_need_times,
    unapply,
)

SUSPEND = "suspend"
RESTORE = "restore"
# At most this many users per request: the audit row lists them in one cell (10 MiB at most; user
# IDs are up to 128 characters). A larger ring takes several requests.
MAX_USERS = 50_000
# Users whose Votes rows one snapshot reads before their passes run: bounds the client's memory
# (a few hundred bytes per vote) whatever the ring's size.
USERS_PER_SNAPSHOT = 2_000
# A user's row in a record's commit: its key, the suspension and Since or RestoredAt.
MUTATIONS_PER_USER_ROW = insert_cost(USER_SUSPENSIONS, USER_SUSPENSION_RECORD_COLUMNS)
USERS_PER_RECORD_COMMIT = (MUTATION_BUDGET - len(SUSPENSION_COLUMNS) - MARK_CHANGED_COST) // MUTATIONS_PER_USER_ROW


# An operator's request retries what a retry fixes patiently: on the emulator, which runs one
# read-write transaction at a time, a running stream's sink aborts a pass again and again (measured:
# a pass under a 500 votes/s stream used up the default 12 attempts); on Spanner aborts are rare.
REQUEST_RETRY = RetryPolicy(attempts=10_000, max_delay_s=0.5, deadline_s=3_600.0)


class SuspensionIdInUse(ValueError):
    """The ID names a suspension of other users, or since another time."""


class UnknownSuspension(LookupError):
    """A restore of an ID no suspension was recorded under."""


class Request(NamedTuple):
    """One audit row: a suspension or its restore, as recorded and as its passes added up."""

    suspension_id: str
    request: str  # SUSPEND or RESTORE
    reason: str
    actor: str
    since: datetime | None  # a suspension's: votes cast at or after it are held out; None: every vote
    user_ids: tuple[str, ...]  # a suspension's users (a restore's are its suspension's: empty here)
    requested_at: datetime | None  # the record's commit timestamp
    votes: int = 0  # stored votes its passes moved (out for a suspension, back in for a restore)
    counts: Counts = Counts()  # the counts they moved, summed over posts
    commits: int = 0  # the passes that moved them
    finished_at: datetime | None = None  # None: in progress, or stopped (run the same ID again)

    def row(self) -> tuple:
        return self._row(self.requested_at)

    def committed_row(self) -> tuple:
        """Its row to write: RequestedAt the commit's timestamp (spanner.COMMIT_TIMESTAMP, the
        placeholder Spanner fills in)."""
        return self._row(spanner.COMMIT_TIMESTAMP)

    def _row(self, requested_at: datetime | str | None) -> tuple:
        return (
            self.suspension_id,
            self.request,
            self.reason,
            self.actor,
            self.since,
            list(self.user_ids) if self.request == SUSPEND else None,
            requested_at,
            self.votes,
            *self.counts,
            self.commits,
            self.finished_at,
        )

    @property
    def recorded_at(self) -> datetime:
        """`requested_at` of a recorded request (RequestedAt is NOT NULL: every row read has it)."""
        assert self.requested_at is not None, f"suspension {self.suspension_id}: {self.request} not recorded"
        return self.requested_at

    @classmethod
    def from_row(cls, row) -> Request:
        suspension_id, request, reason, actor, since, user_ids, requested_at, votes = row[:8]
        after = 8 + len(COUNTER_COLUMNS)
        return cls(
            suspension_id,
            request,
            reason,
            actor,
            since,
            tuple(user_ids or ()),
            requested_at,
            votes,
            counts_at(row, 8),
            row[after],
            row[after + 1],
        )

    def to_json(self) -> dict:
        """Flat: one field per counter, times as RFC 3339 text."""

        def text(moment: datetime | None) -> str | None:
            return None if moment is None else moment.isoformat()

        return {
            "suspension_id": self.suspension_id,
            "request": self.request,
            "reason": self.reason,
            "actor": self.actor,
            "since": text(self.since),
            "users": len(self.user_ids),
            "requested_at": text(self.requested_at),
            "votes": self.votes,
            **self.counts._asdict(),
            "commits": self.commits,
            "finished_at": text(self.finished_at),
        }


class RequestResult(NamedTuple):
    request: Request  # the audit row as it stands after this run
    written: bool  # this run recorded it (False: a rerun, which found it)
    users: int  # the users of the suspension
    votes: int  # stored votes this run moved
    counts: Counts  # what they moved, summed over posts
    commits: int  # the passes of this run that moved votes

    def to_json(self) -> dict:
        return {
            **self.request.to_json(),
            "users": self.users,
            "written_now": self.written,
            "moved_now": self.votes,
            "moved_counts_now": self.counts._asdict(),
            "commits_now": self.commits,
        }


def requests_of(database, suspension_id: str) -> dict[str, Request]:
    """The audit rows recorded under this ID, by request (point reads)."""
    keys = [[suspension_id, SUSPEND], [suspension_id, RESTORE]]
    with database.snapshot() as snapshot:
        rows = snapshot.read(SUSPENSIONS, columns=SUSPENSION_COLUMNS, keyset=KeySet(keys=keys))
        return {request.request: request for request in map(Request.from_row, rows)}


def _record(database, request: Request, user_rows: list[tuple]) -> bool:
    """The audit row and the first users' rows, one blind commit; False if the row exists (an earlier
    run recorded it, or this one did when a retried commit's first attempt succeeded unseen)."""
    row = request.committed_row()

    def write(batch) -> None:
        batch.insert(SUSPENSIONS, columns=SUSPENSION_COLUMNS, values=[row])
        if user_rows:
            batch.insert_or_update(USER_SUSPENSIONS, columns=USER_SUSPENSION_RECORD_COLUMNS, values=user_rows)
            mark_changed(batch)  # the sinks' loaded suspensions are out of date from this commit on

    try:
        run_with_retries(lambda: commit_mutations(database, write), REQUEST_RETRY)
        return True
    except exceptions.AlreadyExists:
        return False


def _write_user_rows(database, rows: list[tuple]) -> None:
    """Upserts, in commits within the budget (each one idempotent: the same rows again change nothing
    a reader sees)."""
    for start in range(0, len(rows), USERS_PER_RECORD_COMMIT):
        chunk = rows[start : start + USERS_PER_RECORD_COMMIT]

        def write(batch, chunk=chunk) -> None:
            batch.insert_or_update(USER_SUSPENSIONS, columns=USER_SUSPENSION_RECORD_COLUMNS, values=chunk)
            mark_changed(batch)

        run_with_retries(lambda: commit_mutations(database, write), REQUEST_RETRY)  # called at once


def _rows_of(database, suspension_id: str, user_ids: Sequence[str]) -> dict[str, datetime | None]:
    """The suspension's UserSuspensions rows of these users: {user: RestoredAt} (absent: no row)."""
    found: dict[str, datetime | None] = {}
    for start in range(0, len(user_ids), USERS_PER_SNAPSHOT):
        with database.snapshot() as snapshot:
            for row in suspensions_of(snapshot, user_ids[start : start + USERS_PER_SNAPSHOT]):
                if row.suspension_id == suspension_id:
                    found[row.user_id] = row.restored_at
    return found


# How often a user moved vote by vote is marked again before its flags are cleared, at most: each
# round marks the votes the last one found (a vote applied since is marked by the sink itself).
MARKING_ROUNDS = 5


class _Passes:
    """The passes of one run of a request (upvotes/operations/suspension_passes.py), and what they
    moved, added up as they commit (and reported to `on_pass`)."""

    def __init__(
        self,
        database,
        tally: Tally,
        restoring: str | None,
        rows_per_pass: int | None,
        max_mutations: int,
        on_pass: Callable[[Moves], None] | None,
    ) -> None:
        self._database, self._tally, self._restoring = database, tally, restoring
        self._rows_per_pass, self._max_mutations, self._on_pass = rows_per_pass, max_mutations, on_pass
        self.votes, self.counts, self.commits = 0, Counts(), 0

    def _add(self, committed: Iterable[Moves]) -> None:
        for moves in committed:
            if moves.votes:
                self.votes, self.counts, self.commits = (
                    self.votes + moves.votes,
                    self.counts.plus(moves.counts),
                    self.commits + 1,
                )
                if self._on_pass is not None:
                    self._on_pass(moves)

    def over(self, user_ids: Sequence[str]) -> None:
        """Every stored vote of these users moved to what their active suspensions (less the one
        being restored) say, USERS_PER_SNAPSHOT users at a time: a strong snapshot finds the users
        with something to move (or a row to restore), and passes of whole users move them; a user
        whose pass alone breaks the budget moves vote by vote."""
        for start in range(0, len(user_ids), USERS_PER_SNAPSHOT):
            users = user_ids[start : start + USERS_PER_SNAPSHOT]
            with self._database.snapshot(multi_use=True) as snapshot:
                suspensions = suspensions_of(snapshot, users)
                votes = list(votes_to_move(snapshot, user_rows_range(*users), rows_need_times(suspensions)))
            groups, alone = plan_user_passes(
                plan_users(votes, suspensions, self._restoring),
                self._rows_per_pass or DEFAULT_USER_ROWS_PER_PASS,
                self._max_mutations,
            )
            for user in alone:
                self._alone(user)
            for group in groups:
                self._group(list(group))

    def _group(self, pending: list[str]) -> None:
        while pending:
            try:
                # The lambda is called at once, with these users.
                self._add(
                    run_with_retries(
                        lambda: reconcile_user_group(
                            self._database, pending, self._tally, self._restoring, self._max_mutations
                        ),
                        REQUEST_RETRY,
                    )
                )
                return
            except UserTooLarge as too_large:  # grew since the snapshot: alone, then the rest again
                user = too_large.args[0]
                self._alone(user)
                pending = [other for other in pending if other != user]

    def _alone(self, user_id: str) -> None:
        """One user's votes moved vote by vote: marked to the user's active suspensions (moving the
        counts of those that change), the user's applied flags cleared (and the restored row
        restored) once every vote they cover is marked, then moved again to what is left."""
        for _ in range(MARKING_ROUNDS):
            self._vote_by_vote(user_id)
            try:
                run_with_retries(
                    lambda: run_transaction(
                        self._database, lambda transaction: unapply(transaction, user_id, self._restoring)
                    ),
                    REQUEST_RETRY,
                )
                break
            except NotYetMarked:
                continue
        else:
            raise RuntimeError(
                f"user {user_id!r}: votes still unmarked after {MARKING_ROUNDS} rounds; run the request again"
            )
        if self._restoring is not None:
            self._vote_by_vote(user_id)

    def _vote_by_vote(self, user_id: str) -> None:
        with self._database.snapshot(multi_use=True) as snapshot:
            holds = holds_of(snapshot, [user_id])
            to_move = [
                vote
                for vote in votes_to_move(snapshot, user_rows_range(user_id), needs_times(holds))
                if needs_move(vote, holds)
            ]
        for batch in plan_passes(to_move, self._rows_per_pass or DEFAULT_ROWS_PER_PASS, self._max_mutations):
            keys = [PostUser(vote.post_id, vote.user_id) for vote in batch]
            # The lambda is called at once, with this pass's keys.
            self._add(
                run_with_retries(
                    lambda: reconcile_votes(self._database, keys, self._tally, self._max_mutations), REQUEST_RETRY
                )
            )


def _finish(database, suspension_id: str, request: str) -> Request:
    """Stamps the audit row's FinishedAt (once) and returns the row as it stands."""
    recorded = requests_of(database, suspension_id)[request]
    if recorded.finished_at is None:
        run_with_retries(
            lambda: commit_mutations(
                database,
                lambda batch: batch.update(
                    SUSPENSIONS,
                    columns=SUSPENSION_FINISH_COLUMNS,
                    values=[(suspension_id, request, spanner.COMMIT_TIMESTAMP)],
                ),
            ),
            REQUEST_RETRY,
        )
        recorded = requests_of(database, suspension_id)[request]
    return recorded


def _checked_users(user_ids: Iterable[str]) -> tuple[str, ...]:
    users = tuple(sorted(set(user_ids)))
    if not users:
        raise ValueError("name at least one user to suspend")
    if len(users) > MAX_USERS:
        raise ValueError(
            f"{len(users):,} users: at most {MAX_USERS:,} per request (the audit row lists them); "
            "split the ring over several IDs"
        )
    return users


def suspend_users(
    database,
    suspension_id: str,
    user_ids: Iterable[str],
    reason: str,
    actor: str,
    since: datetime | None = None,
    rows_per_pass: int | None = None,
    on_pass: Callable[[Moves], None] | None = None,
    max_mutations: int = MUTATION_BUDGET,
) -> RequestResult:
    """Holds every vote-state vote of `user_ids` cast at or after `since` (every vote: None) out of
    every count, now and in flight, audited; idempotent per `suspension_id` (see the module
    docstring). A rerun after the suspension was restored moves nothing. `rows_per_pass`: the most
    Votes rows one pass reads (None: 4,000 for a pass of whole users, 2,000 vote by vote);
    `on_pass` is called after each pass that moved votes (progress)."""
    users = _checked_users(user_ids)
    recorded = requests_of(database, suspension_id)
    written = False
    if SUSPEND not in recorded:
        request = Request(suspension_id, SUSPEND, reason, actor, since, users, None)
        first = [(user_hash(user), user, suspension_id, since) for user in users[:USERS_PER_RECORD_COMMIT]]
        written = _record(database, request, first)
        recorded = requests_of(database, suspension_id)
    found = recorded[SUSPEND]
    if (found.user_ids, found.since) != (users, since):
        raise SuspensionIdInUse(
            f"ID {suspension_id!r} is a suspension of {len(found.user_ids):,} other users or since "
            f"another time ({found.since}): choose another ID, or rerun it as it was recorded"
        )
    if RESTORE in recorded:  # lifted already: nothing to hold out
        return RequestResult(found, written, len(users), 0, Counts(), 0)
    have = _rows_of(database, suspension_id, users)
    _write_user_rows(database, [(user_hash(user), user, suspension_id, since) for user in users if user not in have])
    passes = _Passes(database, Tally(suspension_id, SUSPEND), None, rows_per_pass, max_mutations, on_pass)
    passes.over(users)
    return RequestResult(
        _finish(database, suspension_id, SUSPEND), written, len(users), passes.votes, passes.counts, passes.commits
    )


def restore_users(
    database,
    suspension_id: str,
    reason: str,
    actor: str,
    rows_per_pass: int | None = None,
    on_pass: Callable[[Moves], None] | None = None,
    max_mutations: int = MUTATION_BUDGET,
) -> RequestResult:
    """Lifts a suspension: each of its users counts again with their latest state, unless another
    active suspension of theirs still covers it; audited, idempotent per `suspension_id` (see the
    module docstring). Raises UnknownSuspension for an ID with no suspension."""
    recorded = requests_of(database, suspension_id)
    if SUSPEND not in recorded:
        raise UnknownSuspension(
            f"no suspension was recorded under ID {suspension_id!r} (`upvotes suspensions` lists them)"
        )
    users = recorded[SUSPEND].user_ids
    written = False
    if RESTORE not in recorded:
        written = _record(database, Request(suspension_id, RESTORE, reason, actor, None, (), None), [])
    passes = _Passes(database, Tally(suspension_id, RESTORE), suspension_id, rows_per_pass, max_mutations, on_pass)
    passes.over(users)
    return RequestResult(
        _finish(database, suspension_id, RESTORE), written, len(users), passes.votes, passes.counts, passes.commits
    )


class Suspension(NamedTuple):
    """A suspension as `upvotes suspensions` lists it: its request, and its restore if any."""

    suspended: Request
    restored: Request | None

    @property
    def state(self) -> str:
        """ "active", "restored", or "suspending"/"restoring" while a request is unfinished (stopped:
        run it again with the same ID)."""
        if self.restored is not None:
            return "restored" if self.restored.finished_at is not None else "restoring"
        return "active" if self.suspended.finished_at is not None else "suspending"

    def to_json(self) -> dict:
        suspended, restored = self.suspended, self.restored
        return {
            "suspension_id": suspended.suspension_id,
            "state": self.state,
            "reason": suspended.reason,
            "actor": suspended.actor,
            "since": None if suspended.since is None else suspended.since.isoformat(),
            "users": list(suspended.user_ids),
            "suspended": suspended.to_json(),
            "restored": None if restored is None else {**restored.to_json(), "users": len(suspended.user_ids)},
        }


def list_suspensions(database, limit: int = 100) -> list[Suspension]:
    """The newest suspensions first, each with its restore: the audit table read whole (a few rows a
    day, two per suspension)."""
    with database.snapshot() as snapshot:
        requests = [
            Request.from_row(row)
            for row in snapshot.read(SUSPENSIONS, columns=SUSPENSION_COLUMNS, keyset=KeySet(all_=True))
        ]
    restores = {r.suspension_id: r for r in requests if r.request == RESTORE}
    suspended = sorted((r for r in requests if r.request == SUSPEND), key=lambda r: r.recorded_at, reverse=True)
    return [Suspension(r, restores.get(r.suspension_id)) for r in suspended[:limit]]
