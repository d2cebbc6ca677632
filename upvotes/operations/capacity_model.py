"""What the design needs at a given workload, by model: rows, commits, Spanner nodes, vCPUs.

Pure: no I/O and no clock. Every figure the model rests on comes in as an argument
(`SinkShape` from pipeline.params and spanner_store, `Assumptions` with their sources), so
`upvotes capacity` and the tests choose them, and the write-amplification benchmark checks
the one part that can be measured here: the number of delta rows.

Delta rows. The pipeline writes one delta row per (post, event hour) per window whose votes
do not cancel out (transforms.windowing: the combine runs after the shuffle, so a key has one
pane per window however many workers saw its votes). With votes drawn independently from a
Zipf popularity p_i, a window of V votes touches post i with probability 1 - (1 - p_i)^V,
and its votes cancel (none on another counter, as many un-votes as upvotes) with a probability that depends
only on how many it got. Votes arriving just after an hour boundary may carry the previous
hour (clients report late), which splits that window's rows between two hours.

The fold. A run reads what changed since the previous run and nothing else (spanner_store/
folding.py follows the DeltaCommits change log): `fold_rows_read`, one row per sink commit of the
interval, one Posts row per post voted on in it, one index entry per delta row written in it.
The number of posts in the catalogue is not a term: only the posts voted on in the interval are.

Vote states (one vote per user, schemas/vote_states.py). A `state_fraction` of the votes are
vote-state events, which cannot be blind writes: the sink applies them in read-write transactions
of up to rows_per_commit states (spanner_writes/votes.py), each reading the stored state of every
user in it and writing the later ones to their Votes rows, with one delta row per post it moves
(`state_writes`). So every state costs one Votes row written and two keys read (its stored state,
and its user's erasures, upvotes/operations/forget_user.py, which are almost always none): merging in a window
only drops a user's own repeats, and no batching removes a row that is one per (post, user).
Those rows, not the deltas, set the Spanner nodes vote states need, at Google's published rate
per node for plain writes or for throughput-optimized ones (commits batched by max_commit_delay).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from schemas.counters import COUNTERS

HOUR_S = 3600
# Cancelled groups are summed over even vote counts k = 2, 4, ... until a count's term adds
# less than this fraction of the rows: the terms fall geometrically (each by about
# 4 x upvote x unvote fraction, 0.28 at the default mix), so the rest is smaller still.
NEGLIGIBLE_SHARE = 1e-7


@dataclass(frozen=True)
class Workload:
    """What arrives: votes per second over `posts` posts with Zipf(`zipf`) popularity."""

    votes_per_s: float
    posts: int
    zipf: float
    window_s: int
    batch_size: int = 500  # events per Pub/Sub message
    fold_interval_s: float = 600
    count_reads_per_s: float = 0  # exact-count reads of the hottest post
    shards: tuple[int, ...] = (10, 100)
    client_delay_mean_s: float = 2.0  # how late clients report, on average (exponential)
    unvote_fraction: float = 0.1  # as upvotes.devtools.workload.Workload's defaults
    # Votes on counters other than upvotes (shares, ...): as the generated workloads' defaults.
    other_fraction: float = sum(counter.generated_fraction for counter in COUNTERS)
    state_fraction: float = 0.0  # of the votes, vote-state events (the rest are delta events)


class Assumption(NamedTuple):
    value: float
    source: str


@dataclass(frozen=True)
class Assumptions:
    spanner_writes_per_node_s: Assumption  # rows written per second per node
    spanner_optimized_writes_per_node_s: Assumption  # the same with throughput-optimized writes
    spanner_reads_per_node_s: Assumption  # rows read per second per node
    hot_row_transactions_per_s: Assumption  # serialized read-write transactions on one row
    chain_events_per_core_s: Assumption  # the Beam chain, per vCPU
    sink_rows_per_core_s: Assumption  # delta rows the sink commits per vCPU


@dataclass(frozen=True)
class SinkShape:
    """How the sink and the fold batch their writes (pipeline.params, spanner_store)."""

    rows_per_commit: int
    mutation_budget: int
    mutations_per_delta: int
    mutations_per_parent: int
    mutations_per_commit: int  # the commit's own rows: its TopCandidates and DeltaCommits rows
    posts_per_fold_commit: int
    fold_mutations_per_post: int
    fold_mutations_per_hour: int
    mutations_per_vote: int  # a vote state's Votes row (spanner_writes.votes.MUTATIONS_PER_VOTE)
    rmw_mutations_per_commit: int = 2  # (counter key, count): bench.hot_post's counter rows


class Popularity(NamedTuple):
    """Each post's probability of receiving a vote, hottest first."""

    p: np.ndarray

    @classmethod
    def zipf(cls, posts: int, exponent: float) -> Popularity:
        weights = np.arange(1, posts + 1, dtype=np.float64) ** -exponent
        return cls(weights / weights.sum())

    @property
    def hottest(self) -> float:
        return float(self.p[0])


def cancel_probability(votes: int, unvote_fraction: float, other_fraction: float) -> float:
    """The probability that `votes` votes on one post sum to nothing: none on another counter
    than upvotes (a share, say) among them and as many un-votes (-1) as upvotes (+1)."""
    if votes == 0 or votes % 2:
        return 1.0 if votes == 0 else 0.0
    upvote_fraction = 1.0 - unvote_fraction - other_fraction
    half = votes // 2
    return math.comb(votes, half) * (upvote_fraction * unvote_fraction) ** half


def expected_touched(popularity: Popularity, votes: float) -> float:
    """Expected number of distinct posts among `votes` independent votes: sum of 1 - (1 - p_i)^votes."""
    if votes <= 0:
        return 0.0
    return float(-np.expm1(votes * np.log1p(-popularity.p)).sum())


def expected_groups(popularity: Popularity, votes: float, unvote_fraction: float, other_fraction: float) -> float:
    """Expected number of posts whose share of `votes` votes does not cancel out: the delta rows
    one (window, event hour) costs.

    Post i gets k votes with the binomial probability C(votes, k) p^k (1-p)^(votes-k),
    generalised to a real number of votes (a window's expected votes need not be whole);
    it is computed as (1-p)^votes times (p/(1-p))^k, one in-place product per k.
    """
    if votes <= 0:
        return 0.0
    log_q = np.log1p(-popularity.p)
    touched = expected_touched(popularity, votes)
    if unvote_fraction == 0:
        return touched
    odds_squared = np.exp(2 * (np.log(popularity.p) - log_q))
    weighted = np.exp(votes * log_q)  # becomes (1-p)^votes (p/(1-p))^k for k = 2, 4, ...
    cancelled = 0.0
    k = 2
    while k <= votes:
        weighted *= odds_squared
        comb = math.exp(math.lgamma(votes + 1) - math.lgamma(k + 1) - math.lgamma(votes - k + 1))
        term = cancel_probability(k, unvote_fraction, other_fraction) * comb * float(weighted.sum())
        cancelled += term
        if term < NEGLIGIBLE_SHARE * touched:
            break
        k += 2
    return touched - cancelled


class HourSplit(NamedTuple):
    """A window's expected votes by event hour: the previous hour's (late reports) and its own."""

    previous_hour: float
    own_hour: float


def split_by_hour(start: float, end: float, votes_per_s: float, delay_mean_s: float) -> HourSplit:
    """Votes arriving in [start, end) at a steady rate, each reporting an event time an
    exponential delay before its arrival: how many fall in the hour before the last hour
    boundary at or before `end`, and how many after it. Only the latest boundary matters:
    reaching back past an earlier one takes a delay of an hour."""
    boundary = math.floor(end / HOUR_S) * HOUR_S
    if boundary >= end:
        boundary -= HOUR_S
    before = max(0.0, min(end, boundary) - start)
    after_start = max(start, boundary)
    late = delay_mean_s * (
        math.exp(-(after_start - boundary) / delay_mean_s) - math.exp(-(end - boundary) / delay_mean_s)
    )
    previous = votes_per_s * (before + late)
    return HourSplit(previous, votes_per_s * (end - start) - previous)


def window_groups(popularity: Popularity, split: HourSplit, workload: Workload) -> float:
    return sum(
        expected_groups(popularity, votes, workload.unvote_fraction, workload.other_fraction)
        for votes in split
        if votes > 0
    )


def stream_delta_rows(popularity: Popularity, workload: Workload, start: float, duration_s: float) -> float:
    """Expected delta rows of a finite stream at workload.votes_per_s from `start` (epoch s):
    each window (aligned on multiples of window_s, as FixedWindows are) clipped to the
    stream, split by event hour."""
    end = start + duration_s
    first = math.floor(start / workload.window_s) * workload.window_s
    rows = 0.0
    for window_start in range(int(first), math.ceil(end), workload.window_s):
        lo, hi = max(start, window_start), min(end, window_start + workload.window_s)
        split = split_by_hour(lo, hi, workload.votes_per_s, workload.client_delay_mean_s)
        rows += window_groups(popularity, split, workload)
    return rows


def steady_delta_rows_per_s(popularity: Popularity, workload: Workload) -> float:
    """Expected delta rows per second of an endless stream: every window's rows, plus what the
    first window after each hour boundary adds by splitting its votes between two hours."""
    window_votes = workload.votes_per_s * workload.window_s
    whole = window_groups(popularity, HourSplit(0.0, window_votes), workload)
    after_boundary = window_groups(
        popularity, split_by_hour(0.0, workload.window_s, workload.votes_per_s, workload.client_delay_mean_s), workload
    )
    return whole / workload.window_s + (after_boundary - whole) / HOUR_S


class StateWrites(NamedTuple):
    """What the vote-state events of a workload cost Spanner (see the module docstring). Rates are
    per second; nodes count the Votes rows written and read, not the deltas."""

    votes: float  # vote-state events
    row_writes: float  # Votes rows written: one per state
    row_reads: float  # keys read: two per state (the stored state, the user's erasures)
    transactions: float  # read-write transactions of rows_per_commit states
    delta_rows: float  # one per post each transaction moves (its event hours ignored: a floor)
    mutations: float  # the Votes rows, the delta rows (with their parents, a bound), each commit's own rows
    spanner_nodes: float  # for the Votes rows, at the plain write rate
    spanner_nodes_optimized: float  # the same with throughput-optimized writes
    nodes_per_100k_votes_s: float  # spanner_nodes per 100,000 vote-state events per second
    nodes_per_100k_votes_s_optimized: float


def state_writes(popularity: Popularity, workload: Workload, shape: SinkShape, assumptions: Assumptions) -> StateWrites:
    """The vote-state events' Votes rows, reads, transactions and delta rows. A transaction's states
    are votes drawn from the workload's popularity, so it writes a delta row for each post among them
    (`expected_touched`). It upserts a post's Posts key only the first time its worker meets the post
    (spanner_writes.known_posts.KnownPosts), so no hot row is written per transaction; the mutations count a
    parent per delta row all the same, as a bound."""
    votes = workload.votes_per_s * workload.state_fraction
    transactions = votes / shape.rows_per_commit
    delta_rows = transactions * expected_touched(popularity, shape.rows_per_commit)
    reads_per_node = assumptions.spanner_reads_per_node_s.value

    def nodes(state_votes: float, writes_per_node: float) -> float:
        return state_votes / writes_per_node + 2 * state_votes / reads_per_node

    plain, optimized = (
        assumptions.spanner_writes_per_node_s.value,
        assumptions.spanner_optimized_writes_per_node_s.value,
    )
    return StateWrites(
        votes=votes,
        row_writes=votes,
        row_reads=2 * votes,
        transactions=transactions,
        delta_rows=delta_rows,
        mutations=(
            votes * shape.mutations_per_vote
            + transactions * shape.mutations_per_commit
            + delta_rows * (shape.mutations_per_delta + shape.mutations_per_parent)
        ),
        spanner_nodes=nodes(votes, plain),
        spanner_nodes_optimized=nodes(votes, optimized),
        nodes_per_100k_votes_s=nodes(100_000, plain),
        nodes_per_100k_votes_s_optimized=nodes(100_000, optimized),
    )


class ApproachCapacity(NamedTuple):
    """What one approach needs at the workload. Rates are per second."""

    approach: str
    rows_written: float  # delta rows and Votes rows (this design) or counter rows (RMW, sharded)
    commits: float
    mutations: float
    row_writes: float  # every row written: deltas, parents, folded posts and hours
    row_reads: float
    spanner_nodes: float
    dataflow_vcpus: float | None  # None: no pipeline (the app servers run the transactions)
    hot_row_writes: float  # transactions on the hottest post's busiest row
    hot_row_limit: float
    holds_hot_post: bool


class CapacityReport(NamedTuple):
    workload: Workload
    assumptions: Assumptions
    hottest_post_share: float
    hottest_post_votes_per_s: float
    shards_to_hold_hottest: int  # sharded counters: fewest shards that hold the hottest post
    pubsub_messages_per_s: float
    delta_rows_per_window: float
    posts_per_fold: float
    fold_rows_read: float  # rows one fold run reads to find and sum its work (`fold_rows_read`)
    approaches: tuple[ApproachCapacity, ...]
    vote_states: StateWrites  # what the vote-state events add to this design (included in its figures)


def spanner_nodes(row_writes: float, row_reads: float, assumptions: Assumptions) -> float:
    """Google's guidance gives peak writes *or* peak reads per node, so a mix uses both shares."""
    return (
        row_writes / assumptions.spanner_writes_per_node_s.value
        + row_reads / assumptions.spanner_reads_per_node_s.value
    )


def rows_per_sink_commit(shape: SinkShape) -> int:
    """Delta rows in a full commit: plan_commits' row cap, or its mutation budget when every
    row brings its own parent Posts row (within a window, nearly every row is another post)."""
    return min(
        shape.rows_per_commit,
        (shape.mutation_budget - shape.mutations_per_commit)
        // (shape.mutations_per_delta + shape.mutations_per_parent),
    )


def fold_rows_read(changed_posts: float, unfolded_deltas: float, delta_commits: float) -> float:
    """Rows one fold run reads to find and sum its work, following the change log: the cursor
    (its FoldRuns row), one DeltaCommits row per commit since the previous run, one Posts row per
    post those commits name and one index entry per unfolded delta. The catalogue is no term."""
    return 1 + delta_commits + changed_posts + unfolded_deltas


def this_design(
    workload: Workload,
    rows: float,
    folded_posts: float,
    shape: SinkShape,
    assumptions: Assumptions,
    states: StateWrites,
) -> ApproachCapacity:
    """Blind delta writes (`rows` per second), the vote states' transactions (`states`) and a fold
    of `folded_posts` posts per interval.
    The fold rewrites each post's Posts row and one hourly row per event hour it saw: taken
    as 1 + interval/hour, what a post voted on throughout the interval sees (an upper bound)."""
    sink_commits = rows / rows_per_sink_commit(shape)
    hours_per_post = 1 + workload.fold_interval_s / HOUR_S
    interval = workload.fold_interval_s
    fold_cost = shape.fold_mutations_per_post + shape.fold_mutations_per_hour * hours_per_post
    posts_per_transaction = min(shape.posts_per_fold_commit, int(shape.mutation_budget // fold_cost))
    fold_transactions = math.ceil(folded_posts / posts_per_transaction) / workload.fold_interval_s
    folded_posts_per_s = folded_posts / workload.fold_interval_s
    # An exact read is the Posts row plus the unfolded deltas: on average half a fold
    # interval of the hottest post's windows.
    rows_per_count_read = 1 + workload.fold_interval_s / workload.window_s / 2
    fold_reads_per_s = (
        fold_rows_read(
            folded_posts, (rows + states.delta_rows) * interval, (sink_commits + states.transactions) * interval
        )
        / interval
    )
    row_reads = fold_reads_per_s + workload.count_reads_per_s * rows_per_count_read + states.row_reads
    # Each delta touches its parent; each sink commit writes its TopCandidates and DeltaCommits rows.
    row_writes = (
        (rows + states.delta_rows) * 2
        + (sink_commits + states.transactions) * 2
        + folded_posts_per_s * (1 + hours_per_post)
        + states.row_writes
    )
    mutations = (
        rows * (shape.mutations_per_delta + shape.mutations_per_parent)
        + sink_commits * shape.mutations_per_commit
        + folded_posts_per_s * fold_cost
        + states.mutations
    )
    vcpus = (
        workload.votes_per_s / assumptions.chain_events_per_core_s.value
        + (rows + states.delta_rows + states.row_writes) / assumptions.sink_rows_per_core_s.value
    )
    hot_limit = assumptions.hot_row_transactions_per_s.value
    # The hottest post's busiest row is its Posts row: each window's delta commit upserts its
    # key (a blind write) and each fold rewrites it; a vote-state transaction does not (its worker
    # knows the row exists). Every delta is a new row of its own.
    hot_writes = 1 / workload.window_s + 1 / workload.fold_interval_s
    return ApproachCapacity(
        approach="this design (deltas + fold)",
        rows_written=rows + states.delta_rows + states.row_writes,
        commits=sink_commits + fold_transactions + states.transactions,
        mutations=mutations,
        row_writes=row_writes,
        row_reads=row_reads,
        spanner_nodes=spanner_nodes(row_writes, row_reads, assumptions),
        dataflow_vcpus=vcpus,
        hot_row_writes=hot_writes,
        hot_row_limit=hot_limit,
        holds_hot_post=hot_writes <= hot_limit,
    )


def counters(
    workload: Workload, hot_votes_per_s: float, shards: int, shape: SinkShape, assumptions: Assumptions
) -> ApproachCapacity:
    """Read-modify-write (shards == 1) or sharded counters: every vote is one transaction that
    reads and rewrites one row; reading a count reads every shard."""
    votes = workload.votes_per_s
    row_reads = votes + workload.count_reads_per_s * shards
    hot_row_writes = hot_votes_per_s / shards  # votes spread evenly over the shards
    hot_limit = assumptions.hot_row_transactions_per_s.value
    return ApproachCapacity(
        approach="read-modify-write" if shards == 1 else f"sharded counters ({shards} shards)",
        rows_written=votes,
        commits=votes,
        mutations=votes * shape.rmw_mutations_per_commit,
        row_writes=votes,
        row_reads=row_reads,
        spanner_nodes=spanner_nodes(votes, row_reads, assumptions),
        dataflow_vcpus=None,
        hot_row_writes=hot_row_writes,
        hot_row_limit=hot_limit,
        holds_hot_post=hot_row_writes <= hot_limit,
    )


def capacity(
    workload: Workload, shape: SinkShape, assumptions: Assumptions, popularity: Popularity | None = None
) -> CapacityReport:
    """Every approach's needs at `workload`; `popularity` defaults to the workload's Zipf."""
    popularity = popularity or Popularity.zipf(workload.posts, workload.zipf)
    hot_votes = workload.votes_per_s * popularity.hottest
    # Delta events are summed per window; vote states go through their own transactions.
    delta_events = replace(workload, votes_per_s=workload.votes_per_s * (1 - workload.state_fraction))
    rows = steady_delta_rows_per_s(popularity, delta_events)
    states = state_writes(popularity, workload, shape, assumptions)
    folded_posts = expected_touched(popularity, workload.votes_per_s * workload.fold_interval_s)
    design = this_design(workload, rows, folded_posts, shape, assumptions, states)
    approaches: Iterable[ApproachCapacity] = (
        design,
        counters(workload, hot_votes, 1, shape, assumptions),
        *(counters(workload, hot_votes, n, shape, assumptions) for n in workload.shards),
    )
    return CapacityReport(
        workload=workload,
        assumptions=assumptions,
        hottest_post_share=popularity.hottest,
        hottest_post_votes_per_s=hot_votes,
        shards_to_hold_hottest=math.ceil(hot_votes / assumptions.hot_row_transactions_per_s.value),
        pubsub_messages_per_s=workload.votes_per_s / workload.batch_size,
        delta_rows_per_window=rows * workload.window_s,
        posts_per_fold=folded_posts,
        fold_rows_read=fold_rows_read(
            folded_posts,
            (rows + states.delta_rows) * workload.fold_interval_s,
            (rows / rows_per_sink_commit(shape) + states.transactions) * workload.fold_interval_s,
        ),
        approaches=tuple(approaches),
        vote_states=states,
    )
