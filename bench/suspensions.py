"""Benchmark suspensions (issue 46): suspending a ring and restoring it, finding rings, and what
checking suspensions costs the vote-state sink; each figure beside its same-run baseline.

(a) Suspend and restore, at each ring size of `Sizes.rings` (users; each casts VOTES_PER_RING_USER
    votes), in a database of its own holding the same honest votes over the same posts: the
    honest votes (`honest_votes` from users casting about 10 each, posts by Zipf 1.1, times over the
    last 24 hours) and the ring's (sub-rings of at most SUB_RING users, each voting up its own
    VOTES_PER_RING_USER target posts, every target's votes within 15 minutes, like a ring that
    acts on a signal), all applied through the vote-state sink's own transaction
    (spanner_writes.votes.apply_vote_states), then folded. Then `upvotes suspend-users`'s operation
    (upvotes/operations/suspensions.py) on the ring, timed from its start to every post's exact
    count equal to the brute force without the ring (all posts read in one snapshot, and the hourly
    counts of a sample of the ring's posts) and the three rankings (`fresh_top`, `hot_top`,
    `window_top` 24 h, top 10) certified and equal to the brute force's; when a ranking is not
    certified, a fold is run (`upvotes fold`'s pipeline) and its time counted. Then
    `restore-users` the same way, back to the counts with the ring. The baseline: the same votes'
    first application through the sink, votes/s (what the ring cost to count); and, at ring sizes
    up to `before_max_ring_users`, the same suspension and restore (another ID) through the code of
    BEFORE_COMMIT, which marked every vote (bench/fixtures/suspension_before_applied.py, in a process
    of its own, under the same load, checked the same way). Rows read are counted, and the cost per
    ring vote compared across the sizes: it follows the ring's votes, not the honest votes or the
    catalogue, which stay the same.
(b) The detector (upvotes/operations/suspect_rules.py with its default rules): a workload of `detector_votes`
    votes over a day (honest users with heavy-tailed activity over Zipf 1.1 posts, the 50 most
    popular posts each voted by 30% of their voters within one minute; rings of 20-200 users each
    voting on 10-50 posts, half of them popular, every post's ring votes within 1-10 minutes, plus
    10 camouflage votes per member; 10 serial bots), in memory: precision and recall on ring
    members and bots, and the time. Then the same workload's first `detector_spanner_votes` votes
    through the sink into a database of their own and `upvotes suspects`' operation on them end to
    end (the change log, then the users' Votes rows): rows read, read and detection time, precision
    and recall; and the read alone on the largest ring size's database (every vote of (a) in the
    window).
(c) The sink's cost (spanner_writes.votes.apply_vote_states): `sink_batches` batches of 1,000 new
    vote states (new users over Zipf posts), each applied with `as_before_issue_46=True` (no
    suspensions read, no users in the change-log row: the sink before this issue) and as the stream's
    sink applies them (with the suspensions it holds, spanner_store/suspended_users.py: one key read
    per transaction while they are current), alternating, `sink_rounds` times; mutations (counted by upvotes.devtools.commit_meter from the
    DDL) and time per 1,000 states; the same with a tenth of the batch's users suspended (their
    rows written held out, one more column each); and, nobody suspended, with each user's
    suspension rows read in the transaction (no suspensions held: what `forget-user` and replays
    do, and the sink did before it held them).
"""

from __future__ import annotations

import dataclasses
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TypedDict

import numpy as np
from google.cloud import spanner

from bench.benchmark import Benchmark, table, target
from bench.earlier_code import earlier_tree, run_script_in
from bench.spanner_cost import EmulatorCpu
from bench.stack import (
    WARM_UP_POST,
    LedgeredBatches,
    PacedPublisher,
    check_alive,
    fresh_database,
    run_fold,
    wait_until_ready,
    with_topics,
)
from schemas import post_hash
from schemas.counters import Counts
from schemas.hot_score import DEFAULT_HALF_LIFE_HOURS, hot_score
from schemas.records import CounterSums, PostDelta, PostUser, hour_of_us
from schemas.vote_states import DOWN, UP, LatestVote, counted
from schemas.voter_sketch import sketch_of
from spanner_reads.hourly import hourly_counts_in
from spanner_reads.rankings.all_time import fresh_top
from spanner_reads.rankings.hot import hot_top
from spanner_reads.rankings.last_hours import window_top
from spanner_reads.reads import exact_counts
from spanner_reads.recent_votes import votes_since
from spanner_store.commit_budget import cut_within_budget
from spanner_store.database import MUTATION_BUDGET, commit_mutations, open_database, run_with_retries
from spanner_store.suspended_users import SuspendedUsers
from spanner_store.tables import VOTE_COLUMNS, VOTES, hour_timestamp, micros_timestamp, vote_key
from spanner_writes.deltas import add_delta_writes
from spanner_writes.known_posts import KnownPosts
from spanner_writes.votes import VOTE_BATCH_COST, apply_vote_states
from upvotes.devtools import local_stream
from upvotes.devtools.commit_meter import CommitMeter, metering_commits
from upvotes.devtools.ledger import Ledger
from upvotes.devtools.workload import DEFAULT_BATCH_SIZE, VoteStateWorkload
from upvotes.operations import suspects as suspects_operation
from upvotes.operations.suspect_rules import CastVote, Rules, find_lockstep, find_serial
from upvotes.operations.suspensions import restore_users, suspend_users
from upvotes.resources import Resources

VOTES_PER_RING_USER = 100
SUB_RING = 200  # users of one sub-ring, which votes on its own targets together
RING_SPREAD_S = 900  # a target's ring votes fall within this
HONEST_VOTES_PER_USER = 10
ZIPF = 1.1
DAY_US = 86_400 * 1_000_000
TOP_K = 10
WINDOW_HOURS = 24
SEED_BATCH = 1_000
# Votes rows per blind seed commit at most, with their delta rows; and within the planners' mutation
# budget, as the sink would cut them (VOTE_BATCH_COST): a ring's votes spread over many posts and
# hours add one delta row and one parent per post and hour.
BLIND_BATCH = 2_000
STATES_PER_SINK_BATCH = 1_000
SUSPENDED_SHARE = 0.1
LOAD_WINDOW_S = 2  # the stream's window under load (the race's)
# The code before suspensions moved whole users (a mark per vote): the same-run "before" of (a).
BEFORE_COMMIT = "0d31021"
BEFORE_SCRIPT = Path(__file__).resolve().parent / "fixtures" / "suspension_before_applied.py"
BEFORE_TIMEOUT_S = 3_600.0
SETTLE_TIMEOUT_S = 300.0


def say(message: str) -> None:
    print(f"[suspensions] {message}", flush=True)


# --- the votes, and the brute force --------------------------------------------------------------


class Truth:
    """Every post's counts per event hour, honest and ring apart: the brute force's input."""

    def __init__(self) -> None:
        self.honest: dict[str, dict[int, Counts]] = {}
        self.ring: dict[str, dict[int, Counts]] = {}
        self.load: Ledger | None = None  # what a stream's load published

    def add_warm_up(self) -> None:
        """The upvote bench.stack.wait_until_ready counts, on a post of its own, now."""
        hour = int(time.time()) // 3600 * 3600
        self.honest.setdefault(WARM_UP_POST, {})[hour] = Counts(upvotes=1)

    @staticmethod
    def _add(side: dict, post: str, hour: int, vote: str) -> None:
        hours = side.setdefault(post, {})
        hours[hour] = hours.get(hour, Counts()).plus(Counts(upvotes=1) if vote == UP else Counts(downvotes=1))

    def totals(self, with_ring: bool, posts: list[str]) -> dict[str, Counts]:
        """Every post's expected counts."""
        totals = {post: Counts() for post in posts}
        for post, by_hour in self.hours(with_ring).items():
            for counts in by_hour.values():
                totals[post] = totals.get(post, Counts()).plus(counts)
        return totals

    def hours(self, with_ring: bool) -> dict[str, dict[int, Counts]]:
        """Every post's expected counts per event hour: the honest votes, a stream's load (its
        ledger, upvotes/devtools/ledger.py, as it stands) and, `with_ring`, the ring's."""
        merged = {post: dict(hours) for post, hours in self.honest.items()}
        if self.load is not None:
            for post, by_hour in self.load.hourly().items():
                mine = merged.setdefault(post, {})
                for hour_text, by_counter in by_hour.items():
                    hour = int(datetime.fromisoformat(hour_text.replace("Z", "+00:00")).timestamp())
                    mine[hour] = mine.get(hour, Counts()).plus(Counts(**by_counter))
        if with_ring:
            for post, hours in self.ring.items():
                mine = merged.setdefault(post, {})
                for hour, counts in hours.items():
                    mine[hour] = mine.get(hour, Counts()).plus(counts)
        return merged


def post_name(index: int) -> str:
    return f"sp-{index}"


def zipf_weights(posts: int) -> np.ndarray:
    weights = np.arange(1, posts + 1, dtype=float) ** -ZIPF
    return weights / weights.sum()


def scale_votes(
    posts: int, honest_votes: int, ring_users: int, now_us: int, truth: Truth
) -> tuple[dict[PostUser, LatestVote], list[str]]:
    """The honest votes (the same at every ring size) and a ring's, as vote states; the ring's users."""
    rng = random.Random(46)
    np_rng = np.random.default_rng(46)
    weights = zipf_weights(posts)
    states: dict[PostUser, LatestVote] = {}

    def cast(post: str, user: str, vote: str, at_us: int, side: dict) -> None:
        key = PostUser(post, user)
        if key in states:
            return
        states[key] = LatestVote(vote, at_us, "", hour_of_us(at_us), 1, True)
        Truth._add(side, post, hour_of_us(at_us), vote)

    for user_index in range(honest_votes // HONEST_VOTES_PER_USER):
        for post in np_rng.choice(posts, HONEST_VOTES_PER_USER, replace=False, p=weights):
            cast(
                post_name(int(post)),
                f"honest-{user_index}",
                rng.choice((UP, UP, UP, DOWN)),
                now_us - rng.randrange(DAY_US),
                truth.honest,
            )
    rng = random.Random(ring_users)
    ring = [f"ring-{i}" for i in range(ring_users)]
    for start in range(0, ring_users, SUB_RING):
        members = ring[start : start + SUB_RING]
        for post in rng.sample(range(posts), min(VOTES_PER_RING_USER, posts)):
            at = now_us - rng.randrange(DAY_US - RING_SPREAD_S * 1_000_000)
            for user in members:
                cast(post_name(post), user, UP, at + rng.randrange(RING_SPREAD_S * 1_000_000), truth.ring)
    return states, ring


def seed_states(database, states: dict[PostUser, LatestVote]) -> float:
    """Every state through the sink's own transaction, in batches of one post and hour after another
    (few delta rows per batch); returns the seconds it took."""
    ordered = sorted(states.items(), key=lambda item: (item[0].post_id, item[1].event_hour, item[0].user_id))
    known = KnownPosts()
    started = time.perf_counter()
    for start in range(0, len(ordered), SEED_BATCH):
        batch = dict(ordered[start : start + SEED_BATCH])
        run_with_retries(lambda: apply_vote_states(database, batch, known=known))  # called at once
    return time.perf_counter() - started


def seed_blind(database, states: dict[PostUser, LatestVote]) -> float:
    """What the sink would write for these states on an empty database (their Votes rows, the delta
    rows they add up to per post and hour, each commit's DeltaCommits row with its users), as blind
    commits, without the sink's reads: a fast seed for the votes no figure times. Returns seconds."""
    ordered = sorted(states.items(), key=lambda item: (item[0].post_id, item[1].event_hour, item[0].user_id))
    started = time.perf_counter()
    for start, chunk in enumerate(
        cut_within_budget(ordered, VOTE_BATCH_COST, BLIND_BATCH, MUTATION_BUDGET, "vote state")
    ):
        rows = [
            vote_key(key.post_id, key.user_id)
            + (
                state.vote,
                micros_timestamp(state.at_us),
                state.event_id,
                hour_timestamp(state.event_hour),
                spanner.COMMIT_TIMESTAMP,
            )
            for key, state in chunk
        ]
        sums: dict[tuple[str, int], tuple[Counts, set[str]]] = {}
        for key, state in chunk:
            counts, voters = sums.get((key.post_id, state.event_hour), (Counts(), set()))
            voters.add(key.user_id)
            sums[(key.post_id, state.event_hour)] = (counts.plus(counted(state.vote)), voters)
        commit_id = f"seed-{start}"
        deltas = [
            PostDelta(post, hour, f"@vote/{commit_id}", CounterSums(counts, len(voters), sketch_of(voters)))
            for (post, hour), (counts, voters) in sorted(sums.items())
        ]
        users = sorted({key.user_id for key, _ in chunk})

        def write(batch, rows=rows, deltas=deltas, users=users) -> None:
            batch.insert(VOTES, columns=VOTE_COLUMNS, values=rows)
            add_delta_writes(batch, deltas, user_ids=users)

        run_with_retries(lambda: commit_mutations(database, write))  # called at once
    return time.perf_counter() - started


def expected_top(hours: dict[str, dict[int, Counts]], posts: list[str]) -> list[tuple[str, int]]:
    upvotes = {post: sum(c.upvotes for c in hours.get(post, {}).values()) for post in posts}
    ranked = sorted(upvotes.items(), key=lambda item: (-item[1], post_hash(item[0]), item[0]))
    return ranked[:TOP_K]


def expected_hot(hours: dict[str, dict[int, Counts]]) -> list[str]:
    keys = {post: hot_score(h.items(), DEFAULT_HALF_LIFE_HOURS).key for post, h in hours.items()}
    return [post for post, _ in sorted(keys.items(), key=lambda item: (-item[1], item[0]))[:TOP_K]]


def expected_window(hours: dict[str, dict[int, Counts]], first: int, last: int) -> list[tuple[str, int]]:
    counts = {post: sum(c.upvotes for hour, c in h.items() if first <= hour <= last) for post, h in hours.items()}
    ranked = sorted(((p, n) for p, n in counts.items() if n > 0), key=lambda item: (-item[1], item[0]))
    return ranked[:TOP_K]


def check(database, truth: Truth, with_ring: bool, posts: list[str], sample: list[str]) -> dict:
    """Every post's exact count and a sample's hourly counts against the brute force, and the three
    rankings: certified, and the brute force's."""
    hours = truth.hours(with_ring)
    posts = sorted(set(posts) | set(hours))
    totals = truth.totals(with_ring, posts)
    read = {t.post_id: t.counts for t in exact_counts(database, posts)}
    wrong_counts = sum(read[post] != totals[post] for post in posts)
    wrong_hours = 0
    with database.snapshot(multi_use=True) as snapshot:
        for post in sample:
            stored = {
                int(h.hour.timestamp()): h.counts for h in hourly_counts_in(snapshot, post) if not h.counts.is_zero()
            }
            wrong_hours += stored != {h: c for h, c in hours.get(post, {}).items() if not c.is_zero()}
    top = fresh_top(database, TOP_K)
    hot = hot_top(database, TOP_K)
    now = datetime.now(timezone.utc)
    last = int(now.timestamp()) // 3600 * 3600
    window = window_top(database, TOP_K, hours=WINDOW_HOURS)
    rankings = {
        "all_time": (top.exact, [(p.post_id, p.counts.upvotes) for p in top.posts] == expected_top(hours, posts)),
        "hot": (hot.exact, [p.totals.post_id for p in hot.posts] == expected_hot(hours)),
        "last_24h": (
            window.exact,
            [(p.totals.post_id, p.score) for p in window.posts]
            == expected_window(hours, last - (WINDOW_HOURS - 1) * 3600, last),
        ),
    }
    return {
        "wrong_counts": wrong_counts,
        "wrong_hours": wrong_hours,
        "certified": all(exact for exact, _ in rankings.values()),
        "right": all(right for _, right in rankings.values()),
        "rankings": {name: {"certified": exact, "right": right} for name, (exact, right) in rankings.items()},
    }


class ReadCounter:
    """The database, counting the rows each table's reads return (snapshots and transactions)."""

    def __init__(self, database) -> None:
        self._database = database
        self.rows: dict[str, int] = {}

    def __getattr__(self, name):
        return getattr(self._database, name)

    def snapshot(self, **kwargs):
        return _Counted(self._database.snapshot(**kwargs), self)

    def run_in_transaction(self, work, *args, **kwargs):
        return self._database.run_in_transaction(
            lambda transaction, *a, **kw: work(_Reads(transaction, self), *a, **kw), *args, **kwargs
        )


class _Reads:
    def __init__(self, reader, counter: ReadCounter) -> None:
        self._reader, self._counter = reader, counter

    def __getattr__(self, name):
        return getattr(self._reader, name)

    def read(self, table: str, *args, **kwargs):
        for row in self._reader.read(table, *args, **kwargs):
            self._counter.rows[table] = self._counter.rows.get(table, 0) + 1
            yield row


class _Counted:
    def __init__(self, snapshot, counter: ReadCounter) -> None:
        self._snapshot, self._counter = snapshot, counter

    def __enter__(self):
        return _Reads(self._snapshot.__enter__(), self._counter)

    def __exit__(self, *exc_info):
        return self._snapshot.__exit__(*exc_info)


class Load:
    """`upvotes stream` on the scale's database, with a paced load of new users' vote states (the
    generator's mix: flips, duplicates, late events) published to it while a request runs; the
    ledger of what was published joins the truth once the stream has applied it."""

    def __init__(self, res: Resources, log_dir: Path, votes_per_s: int, posts: int) -> None:
        self.res = with_topics(res, "load")
        self.log_path = log_dir / f"suspensions_stream_{res.database}.log"
        self.votes_per_s = votes_per_s
        self.workload = VoteStateWorkload(
            events=10**9,
            posts=posts,
            zipf=ZIPF,
            seed=4646,
            voters=10**8,
            post_prefix="sp-",
            start_time=datetime.now(timezone.utc),
        )
        self.batches = LedgeredBatches(self.workload)
        self.process = local_stream.start(self.res, LOAD_WINDOW_S, self.log_path)
        self.publisher: PacedPublisher | None = None

    def ready(self, database) -> None:
        wait_until_ready(database, self.res.topic_path(self.res.topic), self.process, self.log_path)

    def start(self) -> None:
        self.publisher = PacedPublisher(
            self.res.topic_path(self.res.topic), self.batches.next_message, self.votes_per_s / DEFAULT_BATCH_SIZE
        )
        self.publisher.start()

    def stop(self) -> int:
        """Stops publishing; the votes published so far (every request's)."""
        assert self.publisher is not None  # started
        self.publisher.stop()
        return self.batches.ledger.events

    def settle(self, database, truth: Truth, with_ring: bool, posts: list[str]) -> float:
        """Seconds until the stream has applied every vote published (every post's exact count equal
        to the truth with the load's ledger added)."""
        started = time.perf_counter()
        expected = truth.totals(with_ring, sorted(set(posts) | set(self.batches.ledger.totals)))
        while {t.post_id: t.counts for t in exact_counts(database, list(expected))} != expected:
            check_alive(self.process, self.log_path)
            if time.perf_counter() - started > SETTLE_TIMEOUT_S:
                raise TimeoutError(
                    f"the stream did not apply its load within {SETTLE_TIMEOUT_S:.0f} s; see {self.log_path}"
                )
            time.sleep(0.5)
        return time.perf_counter() - started

    def close(self) -> None:
        local_stream.stop(self.process)


def timed_request(
    res: Resources,
    database,
    request,
    truth: Truth,
    with_ring: bool,
    posts: list[str],
    sample: list[str],
    load: Load | None = None,
) -> dict:
    """One request (suspend or restore), under the stream's load if any, then the checks; a fold
    when a ranking is not certified."""
    counter = ReadCounter(database)
    if load is not None:
        load.start()
    with EmulatorCpu() as cpu:
        started = time.perf_counter()
        result = request(counter)
        # The earlier code's request runs in a process of its own, which times itself (start-up left out).
        command_s = getattr(result, "seconds", None) or time.perf_counter() - started
    under_load = {}
    if load is not None:
        published = load.stop()
        under_load = {
            "load_votes_published": published,
            "load_votes_per_s": load.votes_per_s,
            "stream_settled_s": round(load.settle(database, truth, with_ring, posts), 1),
        }
    checking = time.perf_counter()
    checked = check(database, truth, with_ring, posts, sample)
    check_s = time.perf_counter() - checking
    fold_s = 0.0
    if not (checked["certified"] and checked["right"]):
        fold_s = run_fold(res)["seconds"]
        checked = check(database, truth, with_ring, posts, sample)
    return {
        **under_load,
        "votes": result.votes,
        "passes": result.commits,
        "command_s": round(command_s, 2),
        "fold_s": round(fold_s, 2),
        "seconds_to_exact": round(command_s + fold_s, 2),
        "check_s": round(check_s, 2),
        "votes_per_s": round(result.votes / command_s, 1),
        "rows_read": dict(counter.rows),
        "emulator_cpu_s": None if cpu.seconds is None else round(cpu.seconds, 1),
        **checked,
    }


class _Earlier:
    """What the earlier code's request reported (seconds, votes, commits), as timed_request reads a result."""

    def __init__(self, found: dict) -> None:
        self.seconds, self.votes, self.commits = found["seconds"], found["votes"], found["commits"]


def requests_before(res: Resources, ring: list[str], timed: Callable[[_Earlier, bool], dict]) -> dict:
    """The suspension and the restore of the ring, ID "bench-ring-before", through the code of
    BEFORE_COMMIT (bench/fixtures/suspension_before_applied.py in that commit's tree, extracted
    once), on this database, each timed and checked by `timed(request_result, with_ring)`: by
    request; empty without git or the commit (a shallow clone)."""
    measured: dict = {}
    with earlier_tree(BEFORE_COMMIT) as tree:
        if tree is None:
            say(f"cannot extract {BEFORE_COMMIT}: no same-run before")
            return measured
        for request, with_ring in (("suspend", False), ("restore", True)):
            say(f"{request} of {len(ring):,} users through the code of {BEFORE_COMMIT} (a mark per vote)")
            found = run_script_in(
                tree,
                BEFORE_SCRIPT,
                {
                    "resources": dataclasses.asdict(res),
                    "request": request,
                    "suspension_id": "bench-ring-before",
                    "users": ring,
                },
                f"the {request} through {BEFORE_COMMIT}'s code",
                BEFORE_TIMEOUT_S,
            )
            measured[request] = timed(_Earlier(found), with_ring)
    return measured


def suspend_and_restore(res: Resources, sizes: Sizes, ring_users: int, log_dir: Path) -> dict:
    database, scale_res = fresh_database(res, f"{res.database[:18]}-r{ring_users}")
    truth = Truth()
    now_us = int(time.time() * 1_000_000)
    states, ring = scale_votes(sizes.posts, sizes.honest_votes, ring_users, now_us, truth)
    posts = [post_name(i) for i in range(sizes.posts)]
    ring_votes = sum(counts.upvotes + counts.downvotes for hours in truth.ring.values() for counts in hours.values())
    say(f"ring of {ring_users:,}: seeding {len(states):,} votes ({ring_votes:,} of the ring)")
    ring_set = set(ring)
    ring_states = sorted(((k, v) for k, v in states.items() if k.user_id in ring_set), key=lambda kv: kv[0])
    sample = dict(random.Random(2).sample(ring_states, min(sizes.sink_baseline_votes, len(ring_states))))
    blind_s = seed_blind(database, {k: v for k, v in states.items() if k not in sample})
    sink_s = seed_states(database, sample)
    say(
        f"ring of {ring_users:,}: {len(states) - len(sample):,} votes written blind in {blind_s:.0f} s, "
        f"{len(sample):,} of the ring's through the sink in {sink_s:.0f} s"
    )
    fold_s = run_fold(scale_res)["seconds"] if sizes.fold_after_seed else None
    hourly_sample = random.Random(1).sample(sorted(truth.ring), min(sizes.hourly_sample, len(truth.ring)))
    load = None
    if sizes.stream_votes_per_s:
        load = Load(scale_res, log_dir, sizes.stream_votes_per_s, sizes.posts)
        load.ready(database)
        truth.add_warm_up()
        truth.load = load.batches.ledger
    try:
        say(f"ring of {ring_users:,}: suspending")
        suspended = timed_request(
            scale_res,
            database,
            lambda db: suspend_users(db, "bench-ring", ring, "bench", "bench"),
            truth,
            False,
            posts,
            hourly_sample,
            load,
        )
        say(
            f"ring of {ring_users:,}: suspended {suspended['votes']:,} votes in {suspended['command_s']:.0f} s; "
            "restoring"
        )
        restored = timed_request(
            scale_res,
            database,
            lambda db: restore_users(db, "bench-ring", "bench", "bench"),
            truth,
            True,
            posts,
            hourly_sample,
            load,
        )
        say(f"ring of {ring_users:,}: restored in {restored['command_s']:.0f} s")
        before = {}
        if ring_users <= sizes.before_max_ring_users:
            before = requests_before(
                scale_res,
                ring,
                lambda found, with_ring: timed_request(
                    scale_res, database, lambda _: found, truth, with_ring, posts, hourly_sample, load
                ),
            )
    finally:
        if load is not None:
            load.close()
    return {
        "ring_users": ring_users,
        "ring_votes": ring_votes,
        "honest_votes": len(states) - ring_votes,
        "posts": sizes.posts,
        "seed_blind_s": round(blind_s, 1),
        "sink_baseline_votes": len(sample),
        "sink_baseline_s": round(sink_s, 1),
        "sink_votes_per_s": round(len(sample) / sink_s, 1),
        "seed_fold_s": None if fold_s is None else round(fold_s, 1),
        "suspend": suspended,
        "restore": restored,
        "before": before,  # the same requests through BEFORE_COMMIT's code, same load (smaller sizes)
        "stream_votes_per_s": sizes.stream_votes_per_s,
        "resources": scale_res,
    }


def drop(resources: Resources) -> None:
    open_database(resources.project, resources.instance, resources.database).drop()


# --- (b) the detector ---------------------------------------------------------------------------


def detector_workload(
    total: int, posts: int, seed: int, start_us: int
) -> tuple[list[CastVote], list[list[str]], list[str]]:
    """The detector's votes (see the module docstring), its rings' members and its bots."""
    rng = random.Random(seed)
    np_rng = np.random.default_rng(seed)
    weights = zipf_weights(posts)
    votes: list[CastVote] = []
    rings: list[list[str]] = []
    ring_votes = 0
    while ring_votes < total * 0.05:
        size, k = rng.randint(20, 200), rng.randint(10, 50)
        members = [f"dr{len(rings)}-{i}" for i in range(size)]
        popular = {int(p) for p in np_rng.choice(posts, k // 2, replace=False, p=weights)}
        tail = [int(p) for p in np_rng.choice(posts, k, replace=False) if int(p) not in popular]
        for post in sorted(popular) + tail[: k - len(popular)]:
            first, spread = start_us + rng.randrange(DAY_US), rng.randint(60, 600) * 1_000_000
            votes += [CastVote(m, post_name(post), UP, first + rng.randrange(spread)) for m in members]
        for member in members:
            votes += [
                CastVote(member, post_name(int(p)), UP, start_us + rng.randrange(DAY_US))
                for p in np_rng.choice(posts, 10, replace=False, p=weights)
            ]
        ring_votes += size * k
        rings.append(members)
    bots = [f"dbot{i}" for i in range(10)]
    for bot in bots:
        first, n = start_us + rng.randrange(DAY_US), rng.randint(150, 400)
        votes += [
            CastVote(bot, post_name(int(p)), UP, first + j * rng.randint(2, 5) * 1_000_000)
            for j, p in enumerate(np_rng.choice(posts, n, replace=False))
        ]
    crowds = {p: start_us + rng.randrange(DAY_US) for p in range(50)}
    user = 0
    while len(votes) < total:
        n = min(500, int(np_rng.pareto(1.2) * 3) + 1, total - len(votes))
        for p in np_rng.choice(posts, n, replace=False, p=weights):
            p = int(p)
            at = (
                crowds[p] + rng.randrange(60_000_000)
                if p in crowds and rng.random() < 0.3
                else start_us + rng.randrange(DAY_US)
            )
            votes.append(CastVote(f"dh{user}", post_name(p), rng.choice((UP, UP, UP, DOWN)), at))
        user += 1
    return votes, rings, bots


def scores(found: set[str], truth: set[str]) -> dict:
    hit = len(found & truth)
    return {
        "flagged": len(found),
        "truth": len(truth),
        "precision": round(hit / len(found), 4) if found else None,
        "recall": round(hit / len(truth), 4) if truth else None,
    }


def detect_in_memory(votes: list[CastVote], rings: list[list[str]], bots: list[str]) -> dict:
    rules = Rules()
    started = time.perf_counter()
    groups = find_lockstep(votes, rules)
    lockstep_s = time.perf_counter() - started
    started = time.perf_counter()
    serial = find_serial(votes, rules)
    serial_s = time.perf_counter() - started
    ring_users = {m for ring in rings for m in ring}
    return {
        "votes": len(votes),
        "rings": len(rings),
        "ring_users": len(ring_users),
        "groups": len(groups),
        "lockstep": scores({u for g in groups for u in g.users}, ring_users),
        "serial": scores({u for s in serial for u in s.users}, set(bots)),
        "lockstep_s": round(lockstep_s, 2),
        "serial_s": round(serial_s, 2),
    }


def detect_through_spanner(
    res: Resources, votes: list[CastVote], rings: list[list[str]], bots: list[str], start_us: int
) -> dict:
    database, _ = fresh_database(res, f"{res.database[:20]}-det")
    states = {
        PostUser(v.post_id, v.user_id): LatestVote(v.vote, v.at_us, "", hour_of_us(v.at_us), 1, True) for v in votes
    }
    seed_s = seed_states(database, states)
    window = datetime.now(timezone.utc) - datetime.fromtimestamp(start_us / 1e6, timezone.utc) + timedelta(minutes=1)
    report = suspects_operation.find(database, window)
    ring_users = {m for ring in rings for m in ring}
    return {
        "votes": len(states),
        "seed_s": round(seed_s, 1),
        **report.summary(),
        "lockstep": scores({u for s in report.suspects if s.kind == "lockstep" for u in s.users}, ring_users),
        "serial": scores({u for s in report.suspects if s.kind == "serial" for u in s.users}, set(bots)),
    }


def read_at_scale(resources: Resources) -> dict:
    """`votes_since` over every vote of the largest ring size's database (all within a day)."""
    database = open_database(resources.project, resources.instance, resources.database)
    started = time.perf_counter()
    read = votes_since(database, datetime.now(timezone.utc) - timedelta(days=1, minutes=5))
    return {
        "votes": len(read.votes),
        "users": read.users_read,
        "commits_read": read.commits_read,
        "votes_rows_read": read.votes_rows_read,
        "rows_read": read.rows_read,
        "read_s": round(time.perf_counter() - started, 2),
    }


# --- (c) the sink's cost ----------------------------------------------------------------------


class SinkOptions(TypedDict, total=False):
    """apply_vote_states' keyword arguments for one kind of batch."""

    as_before_issue_46: bool
    suspended: SuspendedUsers


class SinkRuns(TypedDict):
    """What one kind's batches measured."""

    seconds: list[float]  # per batch
    mutations: float  # CommitMeter.mutations_total
    states: int
    commits: int


def sink_cost(res: Resources, sizes: Sizes) -> dict:
    database, _ = fresh_database(res, f"{res.database[:19]}-sink")
    rng = random.Random(7)
    weights = zipf_weights(sizes.posts)
    np_rng = np.random.default_rng(7)
    now_us = int(time.time() * 1_000_000)
    serial = iter(range(10**9))

    def shape() -> list[tuple[str, str, int]]:
        """One batch's posts, votes and times: every kind of a round applies the same, by new users."""
        return [
            (post_name(int(post)), rng.choice((UP, DOWN)), now_us - rng.randrange(3_600_000_000))
            for post in np_rng.choice(sizes.posts, STATES_PER_SINK_BATCH, p=weights)
        ]

    def batch(votes: list[tuple[str, str, int]], suspended: list[str] | None = None) -> dict[PostUser, LatestVote]:
        states = {}
        for index, (post, vote, at) in enumerate(votes):
            user = f"sk{next(serial)}"
            if suspended is not None and index % round(1 / SUSPENDED_SHARE) == 0:
                user = suspended[index % len(suspended)]
            states[PostUser(post, user)] = LatestVote(vote, at, "", hour_of_us(at), 1, True)
        return states

    suspended = [f"sk-ring{i}" for i in range(200)]
    suspend_users(database, "bench-sink", suspended, "bench", "bench")
    run_with_retries(lambda: apply_vote_states(database, batch(shape())))  # warm: sessions, the posts' first rows
    loaded = SuspendedUsers(database)  # as the stream's sink holds them (transforms/vote_state_sink.py)
    kinds: dict[str, SinkOptions] = {
        "before": {"as_before_issue_46": True},
        "after": {"suspended": loaded},
        "after_suspended": {"suspended": loaded},
        "after_rows_read": {},  # each user's suspension rows read, as forget-user and replays do
    }
    measured: dict[str, SinkRuns] = {kind: {"seconds": [], "mutations": 0, "states": 0, "commits": 0} for kind in kinds}
    order = list(kinds)
    for _ in range(sizes.sink_rounds):
        for _ in range(sizes.sink_batches):
            votes = shape()
            order = order[1:] + order[:1]  # each kind first in turn: no kind always pays for the one before
            for kind in order:
                options = kinds[kind]
                states = batch(votes, suspended if kind == "after_suspended" else None)
                with metering_commits(CommitMeter()) as meter:
                    started = time.perf_counter()
                    run_with_retries(lambda: apply_vote_states(database, states, **options))  # called at once
                    measured[kind]["seconds"].append(time.perf_counter() - started)
                measured[kind]["mutations"] += meter.mutations_total
                measured[kind]["commits"] += meter.commits
                measured[kind]["states"] += len(states)
    out = {}
    for kind, m in measured.items():
        per_batch = STATES_PER_SINK_BATCH / (m["states"] / len(m["seconds"]))
        out[kind] = {
            "batches": len(m["seconds"]),
            "states": m["states"],
            "commits": m["commits"],
            "mutations_per_1k": round(m["mutations"] / m["states"] * 1000, 1),
            "ms_per_1k_median": round(statistics.median(m["seconds"]) * 1000 * per_batch, 1),
            "ms_per_1k_mean": round(statistics.mean(m["seconds"]) * 1000 * per_batch, 1),
        }
    for kind in ("after", "after_suspended", "after_rows_read"):
        out[kind]["mutations_vs_before"] = round(out[kind]["mutations_per_1k"] / out["before"]["mutations_per_1k"], 4)
        out[kind]["time_vs_before"] = round(out[kind]["ms_per_1k_median"] / out["before"]["ms_per_1k_median"], 4)
    return out


# --- the benchmark ------------------------------------------------------------------------------


def run(sizes: Sizes, res: Resources, log_dir: Path) -> dict:
    scales: list[dict] = []
    for ring_users in sizes.rings:
        if scales:  # the emulator keeps every row version: free the smaller size's before the next
            drop(scales[-1].pop("resources"))
        scales.append(suspend_and_restore(res, sizes, ring_users, log_dir))
    largest = scales[-1].pop("resources")
    at_scale = read_at_scale(largest)
    start_us = int(time.time() * 1_000_000) - DAY_US
    say(f"detector: {sizes.detector_votes:,} votes in memory")
    votes, rings, bots = detector_workload(sizes.detector_votes, sizes.posts, 46, start_us)
    in_memory = detect_in_memory(votes, rings, bots)
    small_votes, small_rings, small_bots = detector_workload(sizes.detector_spanner_votes, sizes.posts, 47, start_us)
    say(f"detector: {len(small_votes):,} votes through Spanner")
    through_spanner = detect_through_spanner(res, small_votes, small_rings, small_bots, start_us)
    say("the sink's cost")
    sink = sink_cost(res, sizes)
    return {
        "scales": scales,
        "detector": {
            "in_memory": in_memory,
            "through_spanner": through_spanner,
            "read_at_scale": at_scale,
            "rules": Rules().__dict__,
        },
        "sink": sink,
        "votes_per_ring_user": VOTES_PER_RING_USER,
        "sub_ring": SUB_RING,
    }


@dataclass(frozen=True)
class Sizes:
    posts: int
    honest_votes: int
    rings: tuple[int, ...]  # ring users at each size; each casts VOTES_PER_RING_USER votes
    fold_after_seed: bool  # suspend a folded database (the seed's commits are then no read's concern)
    stream_votes_per_s: int  # `upvotes stream` under this load of vote states during each request (0: none)
    detector_votes: int  # in memory
    detector_spanner_votes: int  # through the sink and `upvotes suspects`' read
    sink_baseline_votes: int  # of the ring's votes applied through the sink, timed (the rest written blind)
    sink_batches: int  # of 1,000 states, per kind and round
    sink_rounds: int
    hourly_sample: int  # ring target posts whose hourly counts are checked after each step (one read each)
    before_max_ring_users: int  # the same-run before (a mark per vote) at ring sizes up to this


FULL = Sizes(
    posts=10_000,
    honest_votes=200_000,
    rings=(1_000, 10_000),
    fold_after_seed=True,
    stream_votes_per_s=500,
    detector_votes=1_000_000,
    detector_spanner_votes=100_000,
    sink_baseline_votes=50_000,
    sink_batches=10,
    sink_rounds=3,
    hourly_sample=100,
    before_max_ring_users=1_000,  # at 10,000 users the earlier code takes about 20 minutes
)
# Quick: a smoke run in under 40 s with the emulators' start (posts: the detector's honest users cast
# up to 500 votes each, on distinct posts).
QUICK = Sizes(
    posts=500,
    honest_votes=1_500,
    rings=(10, 20),
    fold_after_seed=False,
    stream_votes_per_s=0,
    detector_votes=10_000,
    detector_spanner_votes=2_000,
    sink_baseline_votes=1_000,
    sink_batches=1,
    sink_rounds=1,
    hourly_sample=20,
    before_max_ring_users=10,
)


def targets(document: dict) -> list[dict]:
    s = document["benchmarks"]["suspensions"]
    largest = s["scales"][-1]
    det = s["detector"]["in_memory"]
    sink = s["sink"]
    return [
        target(
            "Suspend and restore: every count and ranking exact without the ring, and back, within 5 minutes "
            f"at {largest['ring_votes']:,} ring votes",
            "; ".join(
                f"{sc['ring_votes']:,} votes: suspend {sc['suspend']['seconds_to_exact']:.0f} s, restore "
                f"{sc['restore']['seconds_to_exact']:.0f} s"
                + (
                    f" (same run, the code of {BEFORE_COMMIT}, a mark per vote: suspend "
                    f"{sc['before']['suspend']['seconds_to_exact']:.0f} s, restore "
                    f"{sc['before']['restore']['seconds_to_exact']:.0f} s)"
                    if len(sc.get("before", {})) == 2
                    else ""
                )
                for sc in s["scales"]
            ),
            max(largest["suspend"]["seconds_to_exact"], largest["restore"]["seconds_to_exact"]) <= 300
            and all(
                r["wrong_counts"] == 0 and r["right"]
                for sc in s["scales"]
                for r in (sc["suspend"], sc["restore"], *sc.get("before", {}).values())
            ),
        ),
        target(
            "Detector precision and recall on ring members >= 0.95",
            f"precision {det['lockstep']['precision']}, recall {det['lockstep']['recall']} over {det['votes']:,} votes "
            f"({det['rings']} rings, {det['ring_users']:,} members)",
            (det["lockstep"]["precision"] or 0) >= 0.95 and (det["lockstep"]["recall"] or 0) >= 0.95,
        ),
        target(
            "The sink with suspension checks: at most +10% mutations and time per 1,000 vote states",
            f"mutations x{sink['after']['mutations_vs_before']:.3f}, time x{sink['after']['time_vs_before']:.3f}",
            sink["after"]["mutations_vs_before"] <= 1.10 and sink["after"]["time_vs_before"] <= 1.10,
        ),
    ]


def markdown(document: dict) -> list[str]:
    s = document["benchmarks"]["suspensions"]
    rows = []
    for sc in s["scales"]:
        measured = [(sc[request], request) for request in ("suspend", "restore")] + [
            (r, f"{request} before ({BEFORE_COMMIT}: a mark per vote)") for request, r in sc.get("before", {}).items()
        ]
        for r, label in measured:
            load = (
                "-"
                if "load_votes_published" not in r
                else f"{r['load_votes_published']:,} votes at {r['load_votes_per_s']:,}/s, applied {r['stream_settled_s']:.1f} s "
                "after"
            )
            rows.append(
                [
                    f"{sc['ring_users']:,} users, {sc['ring_votes']:,} votes",
                    label,
                    f"{r['votes']:,}",
                    f"{r['command_s']:.1f}",
                    f"{r['fold_s']:.1f}",
                    f"{r['seconds_to_exact']:.1f}",
                    f"{r['votes_per_s']:,.0f}",
                    f"{r['command_s'] / r['votes'] * 1000:.2f}",
                    f"{sc['sink_votes_per_s']:,.0f}",
                    f"{r['rows_read'].get('Votes', 0):,}" if r["rows_read"] else "-",
                    load,
                    "yes" if r["wrong_counts"] == 0 and r["wrong_hours"] == 0 and r["right"] else "NO",
                    "yes" if r["certified"] else "no",
                ]
            )
    det, spanner_run, at_scale, sink = (
        s["detector"]["in_memory"],
        s["detector"]["through_spanner"],
        s["detector"]["read_at_scale"],
        s["sink"],
    )
    return [
        "Suspensions: a ring held out of every count and ranking and restored, the detector, the sink's cost",
        table(
            [
                "Ring",
                "Request",
                "Votes moved",
                "Command s",
                "Fold s",
                "To exact s",
                "Votes/s",
                "ms per vote",
                "Baseline: the ring's votes/s through the sink",
                "Votes rows read",
                "Stream under load",
                "Exact",
                "Certified",
            ],
            rows,
        ),
        f"Honest votes: {s['scales'][0]['honest_votes']:,} over {s['scales'][0]['posts']:,} posts in each database; "
        f'the ring in sub-rings of {s["sub_ring"]}, {s["votes_per_ring_user"]} votes per member. "To exact": the '
        "command, plus a fold when a ranking was not certified without one.",
        table(
            [
                "Detector",
                "Votes",
                "Lockstep precision",
                "Lockstep recall",
                "Serial precision",
                "Serial recall",
                "Rows read",
                "Read s",
                "Detection s",
            ],
            [
                [
                    "in memory",
                    f"{det['votes']:,}",
                    f"{det['lockstep']['precision']}",
                    f"{det['lockstep']['recall']}",
                    f"{det['serial']['precision']}",
                    f"{det['serial']['recall']}",
                    "-",
                    "-",
                    f"{det['lockstep_s'] + det['serial_s']:.1f}",
                ],
                [
                    "through Spanner",
                    f"{spanner_run['votes']:,}",
                    f"{spanner_run['lockstep']['precision']}",
                    f"{spanner_run['lockstep']['recall']}",
                    f"{spanner_run['serial']['precision']}",
                    f"{spanner_run['serial']['recall']}",
                    f"{spanner_run['rows_read']:,}",
                    f"{spanner_run['read_s']:.1f}",
                    f"{spanner_run['detect_s']:.1f}",
                ],
                [
                    "the read alone, largest ring's database",
                    f"{at_scale['votes']:,}",
                    "-",
                    "-",
                    "-",
                    "-",
                    f"{at_scale['rows_read']:,}",
                    f"{at_scale['read_s']:.1f}",
                    "-",
                ],
            ],
        ),
        table(
            ["Sink, per 1,000 vote states", "Mutations", "x before", "ms (median)", "x before"],
            [
                [
                    label,
                    f"{sink[kind]['mutations_per_1k']:,.0f}",
                    "1.0" if kind == "before" else f"{sink[kind]['mutations_vs_before']:.3f}",
                    f"{sink[kind]['ms_per_1k_median']:,.0f}",
                    "1.0" if kind == "before" else f"{sink[kind]['time_vs_before']:.3f}",
                ]
                for kind, label in (
                    ("before", "before (as_before_issue_46)"),
                    ("after", "after, no user suspended"),
                    ("after_suspended", f"after, {SUSPENDED_SHARE:.0%} of states by suspended users"),
                    ("after_rows_read", "after, no suspensions held: each user's rows read"),
                )
                if kind in sink
            ],
        ),
    ]


BENCHMARK = Benchmark(
    name="suspensions",
    title="Suspending a ring and restoring it, the detector, the sink's cost of the checks",
    full=FULL,
    quick=QUICK,
    run=run,
    markdown=markdown,
    targets=targets,
)
