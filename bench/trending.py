"""What is viral now (issue 36): `upvotes top --by hot` and `upvotes top --last 24h` as the
catalogue grows, against a brute-force scan of every post, checked against a ledger; how fast a
post made viral now reaches hot rank 1; and what the hot ranking costs the sink and the fold.

One database grows through the catalogue sizes. At each size the posts are seeded straight
into Spanner (`seed`): Posts rows with their counts, FoldedThrough and the HotKey that
schemas/hot_score.py gives their seeded hours, fenced at FoldedThrough (HotKeyThrough, as the
fold writes it; the half-life recorded in RankingSettings, and
hot_backfilled = 1), their PostHourlyCounts rows with HourShard, and a FoldRuns row whose
ChangesThrough is the reads' fold cursor: as a fold would have left them, in commits of up to
SEED_MUTATIONS_PER_COMMIT mutations from `seed_threads` threads. The votes spread over 30 days
of event hours: VIRAL_NOW posts viral now (thousands of votes in each of the last hours),
PAST_VIRAL posts viral days ago (tens of thousands, decayed), RISING posts with hundreds in
the last day, and the long tail: a vote or a few on one to three random hours (most on one: the
emulator holds about 6 KB per Posts row with its index entries and 4 KB per hourly row with its
entry, about 11 GB at 1,000,000 posts; with 1.7 hourly rows a post, 13-15 GB, the emulator was
OOM-killed on this shared 23 GB machine). The `Ledger` keeps every seeded (post, hour) count in
memory (numpy arrays) for the brute force.

At each size, after seeding:

- the two commands as a user runs them (the installed `upvotes` in a subprocess: interpreter,
  imports, the read; the median of `repetitions` runs, fewer once `budget_s` is spent) when
  `upvotes top` has `--by` and `--last`; always, the read functions they call
  (spanner_reads.rankings hot.hot_top and last_hours.window_top, in-process, the median of `read_repetitions`)
  with what they read: posts considered, candidate rows (TopCandidates rows since the fold
  cursor) and rows read (index rows and hourly rows);
- the brute force, same run, same database (`brute_force`): every post's rows read and ranked,
  by the client (every PostHourlyCounts row, both rankings from one scan), by SQL aggregates of
  every hourly row, and for hot by a scan of every Posts row's HotKey; the fastest one without a
  rank error is each ranking's baseline;
- rank errors: each answer (the read functions', the commands', the brute force's) against
  the ledger's own ranking, computed from the seeded counts with the same arithmetic
  (`Ledger.hot_ranking`, `Ledger.window_ranking`): ranks whose post differs, plus the answer's
  exact all-time counts against the ledger's;
- freshness (`sink_freshness`): a new post's votes in the current hour through the sink's own
  commit (spanner_writes.deltas.write_deltas, one commit per window of the streaming default
  WINDOW_S, with a long tail of other posts' votes in the same window, as a pane arrives);
  hot_top polled, no fold, until the post is rank 1 and the answer certified. Then a real fold
  (`upvotes fold`'s pipeline, in-process) folds it, so the next size starts folded. With
  `streaming_freshness` (full run), at the largest size the same through the real streaming
  pipeline: `upvotes stream` (WINDOW_S windows) and a burst published to Pub/Sub, from the
  first publish to hot rank 1.

Sink and fold cost (`sink_and_fold_cost`), in a database of its own: a hot post's panes and a
long tail of votes on random hours of the last 30 days, through the sink's commits (planned by
spanner_writes.deltas.plan_commits), then one fold; every commit's client mutations recorded and
counted by upvotes.devtools.mutation_count's rules. "After": this code's commits on posts.sql.
"Before": the same windows and fold through the code of the last commit before issue 36
(BEFORE_COMMIT, extracted with `git archive` and run in a subprocess by
bench/fixtures/commits_before_issue_36.py, on a database its own provision created), its commits
counted on its schema (bench/fixtures/posts_before_issue_36.sql, posts.sql at that commit).
Beside it, the schema's share alone: this code's commits counted on that schema with the columns
it did not have dropped from each mutation (the only "before" when git or the commit is missing).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import random
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from google.api_core import exceptions
from google.cloud import spanner
from google.cloud.spanner_v1 import Mutation, param_types

import schemas
from bench.benchmark import Benchmark, table, target
from bench.catalogue_cost import upvotes_command
from bench.earlier_code import earlier_tree, run_script_in
from bench.stack import (
    check_alive,
    fresh_database,
    run_fold,
    streaming_pipeline,
    upvotes_of,
    wait_until_ready,
    with_topics,
)
from schemas.contract import batch_messages
from schemas.counters import Counts
from schemas.ddl import schema_model
from schemas.hot_score import DEFAULT_HALF_LIFE_HOURS, HOUR_S, HotScore, hot_score
from schemas.records import PostDelta
from spanner_reads.rankings.hot import hot_top
from spanner_reads.rankings.last_hours import window_hours, window_top
from spanner_reads.rankings.trending_top import TrendingTop
from spanner_store.database import commit_mutations, run_with_retries
from spanner_store.mutation_cost import insert_cost
from spanner_store.ranking_settings import BACKFILLED, HALF_LIFE, record_setting
from spanner_store.tables import (
    COUNTER_COLUMNS,
    FOLD_RUN_COLUMNS,
    FOLD_RUNS,
    HOURLY,
    POSTS,
    hour_shard,
    hour_timestamp,
    post_key,
)
from spanner_writes.deltas import plan_commits, write_deltas
from upvotes.devtools.commit_meter import CommitMeter, metering_commits
from upvotes.devtools.mutation_count import commit_mutation_count
from upvotes.devtools.publishing import publish_messages
from upvotes.resources import Resources

K = 10
WINDOW_HOURS = 24
WINDOW_S = 10  # the streaming pipeline's default --window-seconds: one sink commit per window
HALF_LIFE_HOURS = DEFAULT_HALF_LIFE_HOURS
SPAN_HOURS = 30 * 24  # the votes' event hours: the last 30 days (the delta retention)
VIRAL_NOW, PAST_VIRAL, RISING = 12, 12, 40  # the first posts of the catalogue; the rest is the long tail
SEED = 36
# Within the writers' 20,000-mutation budget (spanner_store.database.MUTATION_BUDGET).
SEED_MUTATIONS_PER_COMMIT = 19_000
# What the fold writes (the counters in COUNTER_COLUMNS order; no voter sketch: seeded votes have no user).
SEED_POST_COLUMNS = ("PostHash", "PostId", *COUNTER_COLUMNS, "FoldedThrough", "HotKey", "HotKeyThrough")
SEED_HOUR_COLUMNS = ("PostHash", "PostId", "EventHour", *COUNTER_COLUMNS, "HourShard")
POST_MUTATIONS, HOUR_MUTATIONS = insert_cost(POSTS, SEED_POST_COLUMNS), insert_cost(HOURLY, SEED_HOUR_COLUMNS)
FRESH_TAIL = 200  # other posts' one-vote deltas in the viral post's window, as a pane would carry
FRESH_MARGIN = 1.5  # the viral post's pane: this many times the hot #1's score, in votes of now
FRESH_MAX_PANES = 3
FRESH_POLL_S = 0.05
STREAM_TIMEOUT_S = 120.0
# The last commit before issue 36, its schema (posts.sql there) and the packages its sink and fold need.
BEFORE_COMMIT = "21e5855"
BEFORE_DDL = Path(__file__).resolve().parent / "fixtures" / "posts_before_issue_36.sql"
BEFORE_SCRIPT = Path(__file__).resolve().parent / "fixtures" / "commits_before_issue_36.py"
BEFORE_TREE = (
    "bench",
    "local_runner",
    "pipeline",
    "schemas",
    "spanner_reads",
    "spanner_store",
    "spanner_writes",
    "transforms",
    "upvotes",
)
CLI_TIMEOUT_S = 3_600
# A first call this slow is a sample of its own (no warm-up): a call of the read at the largest
# sizes can take minutes on the emulator.
WARM_UP_AS_SAMPLE_S = 2.0

# The brute force: every post's rows read and ranked, in each configuration (the fastest exact one
# is the baseline). "scan": every PostHourlyCounts row read by the client, both rankings computed
# from them (one scan serves both). The SQL ones have Spanner aggregate every row and return K.
HOT_AGGREGATE_SQL = """SELECT PostId,
  SUM((Upvotes - Downvotes) * POW(2, (UNIX_SECONDS(EventHour) - @ref) / @half_life_s)) AS s
FROM PostHourlyCounts GROUP BY PostHash, PostId ORDER BY s DESC, PostId LIMIT @k"""
WINDOW_AGGREGATE_SQL = """SELECT PostId, SUM(Upvotes) AS u FROM PostHourlyCounts
WHERE EventHour BETWEEN @first AND @last GROUP BY PostHash, PostId HAVING u > 0 ORDER BY u DESC, PostId LIMIT @k"""
# Every Posts row's stored HotKey (this issue's column, without its index): the folded side only.
HOT_KEY_SCAN_SQL = """SELECT PostId, HotKey FROM Posts@{FORCE_INDEX=_BASE_TABLE}
WHERE HotKey IS NOT NULL ORDER BY HotKey DESC, PostHash, PostId LIMIT @k"""


def say(message: str) -> None:
    print(f"[bench trending] {message}", flush=True)


# --- the ledger ------------------------------------------------------------------------------


class Ledger:
    """Every seeded or written count by (post, event hour): posts by index (`ids`), and one row per
    (post, hour) in numpy arrays. Rankings are computed from it with the reads' arithmetic."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self._index: dict[str, int] = {}
        self._parts: list[tuple[np.ndarray, ...]] = []
        self._arrays: tuple[np.ndarray, ...] | None = None

    def post(self, post_id: str) -> int:
        index = self._index.get(post_id)
        if index is None:
            index = self._index[post_id] = len(self.ids)
            self.ids.append(post_id)
        return index

    def add(self, posts: list[int], hours: list[int], up: list[int], down: list[int]) -> None:
        """Rows of (post index, hour start in epoch seconds, upvotes, downvotes); a (post, hour) may repeat."""
        self._parts.append(
            (
                np.asarray(posts, dtype=np.int64),
                np.asarray(hours, dtype=np.int64) // HOUR_S,
                np.asarray(up, dtype=np.int64),
                np.asarray(down, dtype=np.int64),
            )
        )
        self._arrays = None

    def arrays(self) -> tuple[np.ndarray, ...]:
        if self._arrays is None:
            self._arrays = tuple(np.concatenate(column) for column in zip(*self._parts))
            self._parts = [self._arrays]
        return self._arrays

    def hours_of(self, post_id: str) -> dict[int, Counts]:
        post, hour, up, down = self.arrays()
        hours: dict[int, Counts] = {}
        for i in np.nonzero(post == self._index[post_id])[0]:
            at = int(hour[i]) * HOUR_S
            hours[at] = hours.get(at, Counts()).plus(Counts(upvotes=int(up[i]), downvotes=int(down[i])))
        return hours

    def totals(self, post_id: str) -> Counts:
        total = Counts()
        for counts in self.hours_of(post_id).values():
            total = total.plus(counts)
        return total

    def hot_ranking(self, k: int, half_life: float) -> list[tuple[str, HotScore]]:
        """The top k by hot score as hot_top ranks them: S descending, ties by post ID. A float sum
        per post (numpy) finds the candidates; schemas.hot_score scores them exactly."""
        post, hour, up, down = self.arrays()
        reference = int(hour.max())
        weights = (up - down) * np.exp2((hour - reference) / half_life)
        approx = np.bincount(post, weights=weights, minlength=len(self.ids))
        order = np.argsort(-approx, kind="stable")
        kth = approx[order[min(k, len(order)) - 1]]
        # Every post within a relative 1e-6 of the k-th (far beyond the float sum's error) is scored exactly.
        candidates = [int(i) for i in order[: max(k * 4, 64)] if approx[i] >= kth - abs(kth) * 1e-6]
        if len(candidates) >= max(k * 4, 64):
            candidates = [int(i) for i in np.nonzero(approx >= kth - abs(kth) * 1e-6)[0]]
        scores = {self.ids[i]: hot_score(self.hours_of(self.ids[i]).items(), half_life) for i in candidates}
        ranked = sorted(scores, key=lambda p: (*scores[p].order(), p))[:k]
        return [(p, scores[p]) for p in ranked]

    def window_ranking(self, k: int, first: int, last: int) -> list[tuple[str, int]]:
        """The top k by upvotes in event hours [first, last] (epoch seconds), ties by post ID, as window_top."""
        post, hour, up, _ = self.arrays()
        inside = (hour >= first // HOUR_S) & (hour <= last // HOUR_S)
        sums = np.bincount(post[inside], weights=up[inside], minlength=len(self.ids)).astype(np.int64)
        positive = np.nonzero(sums > 0)[0]
        if len(positive) == 0:
            return []
        top = positive[np.argsort(-sums[positive], kind="stable")]
        kth = sums[top[min(k, len(top)) - 1]]
        tied = [int(i) for i in positive if sums[i] >= kth]
        ranked = sorted(tied, key=lambda i: (-int(sums[i]), self.ids[i]))[:k]
        return [(self.ids[i], int(sums[i])) for i in ranked]

    @property
    def rows(self) -> int:
        return len(self.arrays()[0])


def rank_errors(answer: list[str], truth: list[str]) -> int:
    """Ranks whose post differs between an answer and the ledger's ranking (a missing rank counts)."""
    return sum(
        1 for i in range(max(len(answer), len(truth))) if i >= len(answer) or i >= len(truth) or answer[i] != truth[i]
    )


# --- seeding ---------------------------------------------------------------------------------


def post_name(index: int) -> str:
    if index < VIRAL_NOW:
        return f"tr-now-{index}"
    if index < VIRAL_NOW + PAST_VIRAL:
        return f"tr-past-{index - VIRAL_NOW}"
    if index < VIRAL_NOW + PAST_VIRAL + RISING:
        return f"tr-rising-{index - VIRAL_NOW - PAST_VIRAL}"
    return f"tr-{index}"


def post_hours(index: int, now_hour: int, rng: random.Random) -> dict[int, tuple[int, int]]:
    """The seeded (upvotes, downvotes) per event hour (epoch seconds) of post number `index`."""
    hours: dict[int, tuple[int, int]] = {}

    def put(hours_ago: int, up: int, down: int) -> None:
        at = now_hour - hours_ago * HOUR_S
        old = hours.get(at, (0, 0))
        hours[at] = (old[0] + up, old[1] + down)

    if index < VIRAL_NOW:  # viral now: thousands in each of the last 2-5 hours, growing
        for ago in range(rng.randint(2, 5)):
            up = int((600 + 350 * index) * (1 + rng.random()) / (1 + ago))
            put(ago, up, up // 25)
        for _ in range(rng.randint(0, 3)):
            put(rng.randrange(24, SPAN_HOURS), rng.randint(1, 5), 0)
    elif index < VIRAL_NOW + PAST_VIRAL:  # viral one to twenty days ago: tens of thousands, decayed
        start = 24 + (index - VIRAL_NOW) * 36 + rng.randrange(12)
        for ago in range(start, start + rng.randint(2, 4)):
            up = rng.randint(10_000, 30_000)
            put(ago, up, up // 40)
    elif index < VIRAL_NOW + PAST_VIRAL + RISING:  # rising: hundreds in the last day
        for _ in range(rng.randint(2, 6)):
            put(rng.randrange(24), rng.randint(20, 300), rng.randint(0, 5))
    else:  # the long tail: a vote or a few, on one to three random hours (most on one)
        for _ in range(rng.choices((1, 2, 3), weights=(90, 8, 2))[0]):
            up = rng.choices((0, 1, 2, 3), weights=(5, 60, 25, 10))[0]
            down = 1 if up == 0 or rng.random() < 0.05 else 0
            put(rng.randrange(SPAN_HOURS), up, down)
    return hours


class SeedBatch:
    """One seeding commit's rows, and the ledger rows they hold."""

    def __init__(self) -> None:
        self.posts: list[tuple] = []
        self.hours: list[tuple] = []
        self.mutations = 0


def seed_batches(first: int, last: int, now_hour: int, folded_at: datetime, ledger: Ledger) -> Iterator[SeedBatch]:
    """Posts first..last-1 with their hourly rows and HotKey, in commits of at most
    SEED_MUTATIONS_PER_COMMIT mutations (index entries included); each post goes into the ledger."""
    batch = SeedBatch()
    rng = random.Random(f"{SEED}:{first}")
    ledger_posts: list[int] = []
    ledger_hours: list[int] = []
    ledger_up: list[int] = []
    ledger_down: list[int] = []
    for index in range(first, last):
        post_id = post_name(index)
        hours = post_hours(index, now_hour, rng)
        post_hash, _ = post_key(post_id)
        score = hot_score(((at, Counts(upvotes=u, downvotes=d)) for at, (u, d) in hours.items()), HALF_LIFE_HOURS)
        totals = Counts(upvotes=sum(u for u, _ in hours.values()), downvotes=sum(d for _, d in hours.values()))
        batch.posts.append((post_hash, post_id, *totals, folded_at, score.key, folded_at))
        shard = hour_shard(post_hash)
        batch.hours += [
            (post_hash, post_id, hour_timestamp(at), *Counts(upvotes=u, downvotes=d), shard)
            for at, (u, d) in hours.items()
        ]
        batch.mutations += POST_MUTATIONS + HOUR_MUTATIONS * len(hours)
        number = ledger.post(post_id)
        for at, (u, d) in hours.items():
            ledger_posts.append(number)
            ledger_hours.append(at)
            ledger_up.append(u)
            ledger_down.append(d)
        if batch.mutations + POST_MUTATIONS + 4 * HOUR_MUTATIONS > SEED_MUTATIONS_PER_COMMIT:
            yield batch
            batch = SeedBatch()
    if batch.posts:
        yield batch
    ledger.add(ledger_posts, ledger_hours, ledger_up, ledger_down)


def commit_seed_batch(database, batch: SeedBatch) -> None:
    def write(mutations) -> None:
        mutations.insert(POSTS, columns=SEED_POST_COLUMNS, values=batch.posts)
        mutations.insert(HOURLY, columns=SEED_HOUR_COLUMNS, values=batch.hours)

    run_with_retries(lambda: commit_mutations(database, write))


def seed(database, first: int, last: int, now_hour: int, ledger: Ledger, threads: int) -> dict:
    """Posts first..last-1 as a fold leaves them, then a FoldRuns row through their FoldedThrough
    (the reads' cursor) and the ranking settings. Commits from `threads` threads."""
    started = time.perf_counter()
    folded_at = datetime.now(timezone.utc)
    commits = hourly_rows = mutations = 0
    pending: list = []
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for batch in seed_batches(first, last, now_hour, folded_at, ledger):
            pending.append(pool.submit(commit_seed_batch, database, batch))
            commits, hourly_rows, mutations = commits + 1, hourly_rows + len(batch.hours), mutations + batch.mutations
            while len(pending) >= 2 * threads:
                pending.pop(0).result()
        for future in pending:
            future.result()
    fold_run = (f"seeded-{first}-{last}", folded_at, last - first, 0, spanner.COMMIT_TIMESTAMP, 0, folded_at)

    def record(batch) -> None:
        batch.insert(FOLD_RUNS, columns=FOLD_RUN_COLUMNS, values=[fold_run])
        record_setting(batch, HALF_LIFE, HALF_LIFE_HOURS)
        record_setting(batch, BACKFILLED, 1.0)

    run_with_retries(lambda: commit_mutations(database, record))
    return {
        "seconds": round(time.perf_counter() - started, 1),
        "posts": last - first,
        "hourly_rows": hourly_rows,
        "commits": commits + 1,
        "mutations": mutations,
    }


# --- the commands and the read functions ---------------------------------------------------------


def cli_has_trending_flags() -> bool:
    """Whether `upvotes top` takes --by and --last yet."""
    done = subprocess.run([upvotes_command(), "top", "--help"], capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    return done.returncode == 0 and "--by" in done.stdout and "--last" in done.stdout


def command_args(res: Resources, by: str) -> list[str]:
    where = ["--project", res.project, "--instance", res.instance, "--database", res.database]
    ranking = ["--by", "hot"] if by == "hot" else ["--last", f"{WINDOW_HOURS}h"]
    return ["top", *where, *ranking, "-n", str(K)]


def timed_command(argv: list[str]) -> tuple[float, list[str]]:
    """Runs `upvotes ARGV`: its seconds and the post IDs it printed, in rank order (JSON lines)."""
    start = time.perf_counter()
    done = subprocess.run([upvotes_command(), *argv], capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"upvotes {' '.join(argv)} exited {done.returncode}: {done.stderr[-2000:]}")
    posts = []
    for line in done.stdout.splitlines():
        with contextlib.suppress(ValueError):
            row = json.loads(line)
            if isinstance(row, dict) and "post_id" in row:
                posts.append(row["post_id"])
    return seconds, posts


def read_function(by: str, database) -> Callable[[], TrendingTop]:
    if by == "hot":
        return lambda: hot_top(database, K)
    return lambda: window_top(database, K, hours=WINDOW_HOURS)


def truth_of(by: str, ledger: Ledger, top: TrendingTop, cache: dict) -> list[str]:
    """The ledger's ranking for the moment `top` was read at (hot: any moment, the order by S does
    not change with time; the window: its hour), cached per ranking and hour."""
    first, last = window_hours(top.as_of, WINDOW_HOURS)
    key = (by, None if by == "hot" else last)
    if key not in cache:
        cache[key] = (
            [p for p, _ in ledger.hot_ranking(K, HALF_LIFE_HOURS)]
            if by == "hot"
            else [p for p, _ in ledger.window_ranking(K, first, last)]
        )
    return cache[key]


def measure_ranking(by: str, database, res: Resources, ledger: Ledger, sizes: Sizes, cli: bool) -> dict:
    """The read function (medians) and the command (medians, when it has the flags), with what
    they read and their rank errors against the ledger."""
    read = read_function(by, database)
    samples, answers = [], []
    started = time.perf_counter()
    first = read()  # the client's sessions and the emulator's query plans: a sample only when slow anyway
    if time.perf_counter() - started > WARM_UP_AS_SAMPLE_S:
        samples.append(time.perf_counter() - started)
        answers.append(first)
    spent = sum(samples)
    while len(samples) < sizes.read_repetitions and (spent < sizes.budget_s or not samples):
        started = time.perf_counter()
        answers.append(read())
        samples.append(time.perf_counter() - started)
        spent += samples[-1]
    top = answers[-1]
    cache: dict = {}
    truth = truth_of(by, ledger, top, cache)
    result = {
        "read_s": round(statistics.median(samples), 4),
        "read_samples_s": [round(s, 4) for s in samples],
        "considered": top.considered,
        "candidate_rows": top.candidate_rows,
        "rows_read": top.rows_read,
        "exact": all(a.exact for a in answers),
        "rank_errors": max(
            rank_errors([p.totals.post_id for p in a.posts], truth_of(by, ledger, a, cache)) for a in answers
        ),
        "counts_exact": all(p.totals.counts == ledger.totals(p.totals.post_id) for p in top.posts),
        "posts": [p.totals.post_id for p in top.posts],
        "truth": truth,
    }
    if cli:
        runs: list[tuple[float, list[str]]] = []
        spent = 0.0
        while len(runs) < sizes.repetitions and (spent < sizes.budget_s or not runs):
            runs.append(timed_command(command_args(res, by)))
            spent += runs[-1][0]
        result["command_s"] = round(statistics.median(s for s, _ in runs), 3)
        result["command_samples_s"] = [round(s, 3) for s, _ in runs]
        # Hot is time-invariant; the window only moves on the hour: compared with the truth of the read's hour.
        result["command_rank_errors"] = max(rank_errors(posts, truth) for _, posts in runs)
    return result


# --- the brute force -------------------------------------------------------------------------


def brute_scan(database, first: int, last: int) -> dict:
    """Every PostHourlyCounts row read by the client; both rankings computed from them: the hot
    score as a float sum per post (relative to the newest hour, so it cannot overflow), the
    window as upvotes in [first, last]."""
    started = time.perf_counter()
    reference = None
    hot: dict[str, float] = {}
    window: dict[str, int] = {}
    rows = 0
    with database.snapshot() as snapshot:
        for post_id, hour, up, down in snapshot.execute_sql(
            "SELECT PostId, UNIX_SECONDS(EventHour), Upvotes, Downvotes FROM PostHourlyCounts"
        ):
            rows += 1
            if reference is None:
                reference = int(time.time()) // HOUR_S
            hot[post_id] = hot.get(post_id, 0.0) + (up - down) * 2.0 ** ((hour // HOUR_S - reference) / HALF_LIFE_HOURS)
            if first <= hour <= last and up:
                window[post_id] = window.get(post_id, 0) + up
    seconds = time.perf_counter() - started
    hot_ranked = sorted(hot, key=lambda p: (-hot[p], p))[:K]
    window_ranked = sorted((p for p in window if window[p] > 0), key=lambda p: (-window[p], p))[:K]
    return {"seconds": seconds, "rows": rows, "hot": hot_ranked, "last": window_ranked}


def brute_sql(database, sql: str, params: dict, types: dict) -> tuple[float | None, list[str]]:
    """The query's seconds and the posts it ranks; (None, []) when the emulator refuses it for its
    size (RESOURCE_EXHAUSTED: its 128 MiB limit on a query's intermediate results, which a GROUP BY
    over every post passes at 1,000,000 posts)."""
    started = time.perf_counter()
    try:
        with database.snapshot() as snapshot:
            posts = [row[0] for row in snapshot.execute_sql(sql, params=params, param_types=types)]
    except exceptions.ResourceExhausted:
        return None, []
    return time.perf_counter() - started, posts


def sql_configuration(seconds: float | None, ranked: list[str], rows: int, truth: list[str]) -> dict:
    if seconds is None:
        return {
            "seconds": None,
            "rows": rows,
            "rank_errors": None,
            "failed": "RESOURCE_EXHAUSTED: over the emulator's 128 MiB for a query's intermediate results",
        }
    return {"seconds": seconds, "rows": rows, "rank_errors": rank_errors(ranked, truth)}


def brute_force(database, ledger: Ledger, posts: int) -> dict:
    """Each configuration's time, rows scanned and rank errors against the ledger; the fastest
    exact one per ranking is the baseline."""
    now = datetime.now(timezone.utc)
    first, last = window_hours(now, WINDOW_HOURS)
    hot_truth = [p for p, _ in ledger.hot_ranking(K, HALF_LIFE_HOURS)]
    window_truth = [p for p, _ in ledger.window_ranking(K, first, last)]
    scan = brute_scan(database, first, last)
    hourly_rows = scan["rows"]
    configurations = {
        "hot": {
            "client scan of PostHourlyCounts": {
                "seconds": scan["seconds"],
                "rows": scan["rows"],
                "rank_errors": rank_errors(scan["hot"], hot_truth),
            }
        },
        "last": {
            "client scan of PostHourlyCounts": {
                "seconds": scan["seconds"],
                "rows": scan["rows"],
                "rank_errors": rank_errors(scan["last"], window_truth),
            }
        },
    }
    seconds, ranked = brute_sql(
        database,
        HOT_AGGREGATE_SQL,
        {"ref": int(now.timestamp()) // HOUR_S * HOUR_S, "half_life_s": HALF_LIFE_HOURS * HOUR_S, "k": K},
        {"ref": param_types.INT64, "half_life_s": param_types.FLOAT64, "k": param_types.INT64},
    )
    configurations["hot"]["SQL aggregate of PostHourlyCounts"] = sql_configuration(
        seconds, ranked, hourly_rows, hot_truth
    )
    seconds, ranked = brute_sql(database, HOT_KEY_SCAN_SQL, {"k": K}, {"k": param_types.INT64})
    configurations["hot"]["SQL scan of Posts.HotKey (this issue's column)"] = sql_configuration(
        seconds, ranked, posts, hot_truth
    )
    seconds, ranked = brute_sql(
        database,
        WINDOW_AGGREGATE_SQL,
        {"first": hour_timestamp(first), "last": hour_timestamp(last), "k": K},
        {"first": param_types.TIMESTAMP, "last": param_types.TIMESTAMP, "k": param_types.INT64},
    )
    configurations["last"]["SQL aggregate of PostHourlyCounts"] = sql_configuration(
        seconds, ranked, hourly_rows, window_truth
    )
    result: dict = {"hourly_rows": hourly_rows}
    for by, configs in configurations.items():
        for config in configs.values():
            if config["seconds"] is not None:
                config["seconds"] = round(config["seconds"], 3)
        ran = {name: c for name, c in configs.items() if c["seconds"] is not None}
        exact = {name: c for name, c in ran.items() if c["rank_errors"] == 0} or ran
        best = min(exact, key=lambda name: exact[name]["seconds"])
        result[by] = {
            "configurations": configs,
            "best": best,
            "seconds": configs[best]["seconds"],
            "rows": configs[best]["rows"],
            "rank_errors": configs[best]["rank_errors"],
        }
    return result


# --- freshness -------------------------------------------------------------------------------


def current_hour() -> int:
    return int(time.time()) // HOUR_S * HOUR_S


def viral_votes(ledger: Ledger) -> int:
    """Votes that put a post with all of them in the current hour FRESH_MARGIN times above the
    hot #1 (its score in votes of now; a vote in the current hour weighs at least 2^(-1/H))."""
    (_, best), *_ = ledger.hot_ranking(1, HALF_LIFE_HOURS)
    now_score = best.at(datetime.now(timezone.utc), HALF_LIFE_HOURS)
    return math.ceil(FRESH_MARGIN * now_score * 2.0 ** (1 / HALF_LIFE_HOURS)) + 1


def tail_posts(ledger: Ledger, count: int, rng: random.Random) -> list[str]:
    tail = VIRAL_NOW + PAST_VIRAL + RISING
    return [ledger.ids[rng.randrange(tail, len(ledger.ids))] for _ in range(count)]


def sink_freshness(database, ledger: Ledger, tag: str) -> dict:
    """A post made viral now, its panes written by the sink's own commit (one per WINDOW_S window,
    with FRESH_TAIL other posts' votes each), hot_top polled until it is certified rank 1; no fold."""
    rng = random.Random(f"{SEED}:fresh:{tag}")
    post_id = f"tr-viral-{tag}"
    votes = viral_votes(ledger)
    panes = reads = 0
    first_commit = seen = None
    while seen is None and panes < FRESH_MAX_PANES:
        hour = current_hour()
        deltas = [PostDelta.of(post_id, hour, f"bench-fresh:{tag}:{panes}:0", upvotes=votes, events=votes)]
        deltas += [
            PostDelta.of(p, hour, f"bench-fresh:{tag}:{panes}:{i + 1}", upvotes=1, events=1)
            for i, p in enumerate(tail_posts(ledger, FRESH_TAIL, rng))
        ]
        started = time.perf_counter()
        for commit in plan_commits(deltas, max_rows=1_000):
            run_with_retries(lambda: write_deltas(database, commit))  # called at once
        committed = time.perf_counter()
        first_commit = first_commit or started
        ledger.add(
            [ledger.post(d.post_id) for d in deltas],
            [d.event_hour for d in deltas],
            [d.sums.counts.upvotes for d in deltas],
            [0] * len(deltas),
        )
        panes += 1
        window_end = committed + WINDOW_S
        while time.perf_counter() < window_end:
            top = hot_top(database, K)
            reads += 1
            if top.posts and top.posts[0].totals.post_id == post_id and top.exact:
                seen = time.perf_counter()
                break
            time.sleep(FRESH_POLL_S)
    assert seen is not None, f"{post_id} never reached hot rank 1 in {panes} windows"
    assert first_commit is not None  # set by the pane that got there
    truth = [p for p, _ in ledger.hot_ranking(K, HALF_LIFE_HOURS)]
    return {
        "post": post_id,
        "votes_per_pane": votes,
        "panes": panes,
        "reads": reads,
        "commit_s": round(committed - started, 3),
        "commit_to_rank_1_s": round(seen - first_commit, 3),
        "rank_errors": rank_errors([p.totals.post_id for p in top.posts], truth),
        "exact": top.exact,
    }


def streaming_freshness(res: Resources, database, ledger: Ledger, log_dir: Path) -> dict:
    """The same through the real pipeline: `upvotes stream` (WINDOW_S windows) on the database, a
    burst of one-vote events for a new post published to Pub/Sub in batches of 500, from the
    first publish to hot_top's certified rank 1; no fold."""
    stream_res = with_topics(res, "trend")
    log_path = log_dir / "trending_stream.log"
    topic_path = stream_res.topic_path(stream_res.topic)
    post_id = "tr-streamed"
    with streaming_pipeline(stream_res, WINDOW_S, log_path) as process:
        wait_until_ready(database, topic_path, process, log_path, post="tr-warm-up")
        ledger.add([ledger.post("tr-warm-up")], [current_hour()], [1], [0])
        votes = viral_votes(ledger)
        now_ms = int(time.time() * 1000)
        event_time = datetime.fromtimestamp(now_ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")
        event = {"post_id": post_id, "counter": "upvotes", "delta": 1, "event_time": event_time.replace("+00:00", "Z")}
        events = (event for _ in range(votes))
        messages = list(batch_messages(events, 500))
        started = time.perf_counter()
        report = publish_messages(topic_path, messages, progress=False)
        published = time.perf_counter()
        reads, seen = 0, None
        deadline = started + STREAM_TIMEOUT_S
        while time.perf_counter() < deadline:
            check_alive(process, log_path)
            top = hot_top(database, K)
            reads += 1
            if top.posts and top.posts[0].totals.post_id == post_id and top.exact:
                seen = time.perf_counter()
                break
            time.sleep(FRESH_POLL_S)
    assert seen is not None, f"{post_id} never reached hot rank 1 in {STREAM_TIMEOUT_S:.0f} s; see {log_path}"
    counted = top.posts[0].totals.counts.upvotes
    ledger.add([ledger.post(post_id)], [int(now_ms / 1000) // HOUR_S * HOUR_S], [votes], [0])
    drained = upvotes_of(database, [post_id])[post_id]  # the stream drained on the way out
    return {
        "post": post_id,
        "votes": votes,
        "messages": len(messages),
        "publish_s": round(published - started, 3),
        "failed_messages": report.failed,
        "publish_to_rank_1_s": round(seen - started, 3),
        "reads": reads,
        "counted_at_rank_1": counted,
        "exact": top.exact,
        "counted_after_drain": drained,
        "counts_exact": drained == votes and report.failed == 0,
    }


# --- sink and fold cost ----------------------------------------------------------------------


@dataclass
class RecordingMeter(CommitMeter):
    """A commit meter (upvotes/devtools/commit_meter.py) that also keeps each commit's client
    mutations, to count them again on the schema before issue 36."""

    mutations: list[list] = dataclasses.field(default_factory=list)

    def record(self, mutations) -> None:
        with self._lock:
            self.mutations.append(list(mutations))
        super().record(mutations)


def before_issue_36(mutations: list) -> list:
    """These client mutations as the schema before issue 36 takes them: the columns and tables
    it did not have dropped from each."""
    now, before = schema_model(), schema_model(schemas.statements_of(BEFORE_DDL.read_text(encoding="utf-8")))
    kept = []
    for mutation in mutations:
        pb = Mutation.pb(mutation)
        kind = pb.WhichOneof("operation")
        write = getattr(pb, kind)
        if write.table not in before:
            continue
        if kind == "delete":
            kept.append(mutation)
            continue
        new_columns = set(now[write.table].columns) - set(before[write.table].columns)
        positions = [i for i, column in enumerate(write.columns) if column not in new_columns]
        stripped = type(pb)()
        out = getattr(stripped, kind)
        out.table = write.table
        out.columns.extend(write.columns[i] for i in positions)
        for row in write.values:
            out.values.add().values.extend(row.values[i] for i in positions)
        kept.append(Mutation.wrap(stripped))
    return kept


def old_model() -> dict:
    return schema_model(schemas.statements_of(BEFORE_DDL.read_text(encoding="utf-8")))


def mutations_of(commits: list[list], before_commits: list[list] | None) -> dict:
    """Mutations of this code's commits on posts.sql (after); of the code before issue 36's commits
    on its DDL (before; None when that code could not be run: then the model below stands for it);
    and of this code's commits on that DDL with the new columns dropped (the schema's share alone)."""
    now, before = schema_model(), old_model()
    part = {
        "commits": len(commits),
        "after": int(sum(commit_mutation_count(c, now) for c in commits)),
        "model": int(sum(commit_mutation_count(before_issue_36(c), before) for c in commits)),
    }
    if before_commits is None:
        return {**part, "before_commits": len(commits), "before": part["model"]}
    return {
        **part,
        "before_commits": len(before_commits),
        "before": int(sum(commit_mutation_count(c, before) for c in before_commits)),
    }


def commits_before_issue_36(res: Resources, windows: list[list[PostDelta]]) -> dict | None:
    """The same windows and fold through the code of BEFORE_COMMIT (bench/fixtures/
    commits_before_issue_36.py in that commit's tree, extracted by `git archive`), in a database
    provisioned by that code: its commits' client mutations. None without git or the commit."""
    with earlier_tree(BEFORE_COMMIT, BEFORE_TREE) as tree:
        if tree is None:
            say(
                f"cannot extract {BEFORE_COMMIT}: the cost before issue 36 is this code's commits "
                "on its schema, the new columns dropped"
            )
            return None
        found = run_script_in(
            tree,
            BEFORE_SCRIPT,
            {
                "resources": dataclasses.asdict(res),
                "database": f"{res.database}-trb"[:30],
                "windows": [[[d.post_id, d.event_hour, d.delta_id, d.sums.counts.upvotes] for d in w] for w in windows],
            },
            f"the workload through {BEFORE_COMMIT}'s code",
            CLI_TIMEOUT_S,
        )
    decoded = {
        phase: [[Mutation.deserialize(bytes.fromhex(m)) for m in commit] for commit in commits]
        for phase, commits in found["commits"].items()
    }
    return {**decoded, "posts_folded": found["posts_folded"], "deltas_folded": found["deltas_folded"]}


def cost_workload(sizes: Sizes, hour: int) -> tuple[list[list[PostDelta]], int]:
    """Per window, the hot post's pane and a long tail of one-to-three-vote deltas on random hours
    of the last 30 days over `cost_posts` posts; and the votes in all."""
    rng = random.Random(f"{SEED}:cost")
    windows, votes = [], 0
    for window in range(sizes.cost_windows):
        deltas = [
            PostDelta.of(
                "cost-hot", hour, f"bench-cost:{window}:0", upvotes=sizes.cost_hot_votes, events=sizes.cost_hot_votes
            )
        ]
        for i in range(sizes.cost_tail_deltas):
            up = rng.randint(1, 3)
            deltas.append(
                PostDelta.of(
                    f"cost-{rng.randrange(sizes.cost_posts)}",
                    hour - rng.randrange(SPAN_HOURS) * HOUR_S,
                    f"bench-cost:{window}:{i + 1}",
                    upvotes=up,
                    events=up,
                )
            )
        windows.append(deltas)
        votes += sum(d.sums.events for d in deltas)
    return windows, votes


def sink_and_fold_cost(res: Resources, sizes: Sizes) -> dict:
    """The workload through the sink's commits (one window's deltas planned into commits as the
    sink plans them), then one fold, in a database of its own; mutations per 1,000 votes."""
    database, fresh = fresh_database(res, f"{res.database}-trc")
    windows, votes = cost_workload(sizes, current_hour())
    with metering_commits(RecordingMeter()) as sink_meter:
        for deltas in windows:
            for commit in plan_commits(deltas, max_rows=1_000):
                run_with_retries(lambda: write_deltas(database, commit))  # called at once
    with metering_commits(RecordingMeter()) as fold_meter:
        folded = run_fold(fresh)
    before = commits_before_issue_36(res, windows)
    per_1k = 1_000 / votes
    result: dict = {
        "votes": votes,
        "windows": sizes.cost_windows,
        "delta_rows": sum(map(len, windows)),
        "deltas_folded": folded["deltas_folded"],
        "posts_folded": folded["posts_folded"],
        "before_from": f"the code of {BEFORE_COMMIT} on its schema"
        if before
        else f"this code's commits on the schema of {BEFORE_COMMIT}, the new columns dropped",
    }
    parts = {
        phase: mutations_of(commits, None if before is None else before[phase])
        for phase, commits in (("sink", sink_meter.mutations), ("fold", fold_meter.mutations))
    }
    parts["sink_and_fold"] = {key: parts["sink"][key] + parts["fold"][key] for key in parts["sink"]}
    for name, part in parts.items():
        result[name] = {
            **part,
            "before_per_1k_votes": round(part["before"] * per_1k, 1),
            "after_per_1k_votes": round(part["after"] * per_1k, 1),
            "model_per_1k_votes": round(part["model"] * per_1k, 1),
            "ratio": round(part["after"] / part["before"], 4),
            "model_ratio": round(part["after"] / part["model"], 4),
        }
    assert folded["deltas_folded"] == result["delta_rows"], (folded, result["delta_rows"])
    assert before is None or (before["deltas_folded"], before["posts_folded"]) == (
        folded["deltas_folded"],
        folded["posts_folded"],
    ), (before and before["deltas_folded"], folded)
    return result


# --- the run ---------------------------------------------------------------------------------


def run(sizes: Sizes, res: Resources, log_dir: Path) -> dict:
    cost = sink_and_fold_cost(res, sizes)
    say(
        f"sink and fold mutations per 1,000 votes: {cost['sink_and_fold']['before_per_1k_votes']:,} before, "
        f"{cost['sink_and_fold']['after_per_1k_votes']:,} after"
    )
    database, fresh = fresh_database(res, f"{res.database}-tr")
    cli = cli_has_trending_flags()
    ledger = Ledger()
    now_hour = current_hour()
    seeded, points = 0, []
    hourly_rows = 0
    for size in sizes.posts:
        seeding = seed(database, seeded, size, now_hour, ledger, sizes.seed_threads)
        hourly_rows += seeding["hourly_rows"]
        say(f"seeded {size:,} posts ({hourly_rows:,} hourly rows) in {seeding['seconds']:.0f} s")
        seeded = size
        point: dict = {"posts": size, "seed": seeding}
        for by in ("hot", "last"):
            point[by] = measure_ranking(by, database, fresh, ledger, sizes, cli)
        point["brute_force"] = brute_force(database, ledger, size)
        point["hourly_rows"] = point["brute_force"]["hourly_rows"]
        for by in ("hot", "last"):
            mine = point[by].get("command_s", point[by]["read_s"])
            point[by]["x_brute_force"] = round(point["brute_force"][by]["seconds"] / mine, 2)
            point[by]["x_brute_force_read"] = round(point["brute_force"][by]["seconds"] / point[by]["read_s"], 2)
        say(
            f"{size:,} posts: hot {point['hot']['read_s'] * 1000:.0f} ms, last {point['last']['read_s'] * 1000:.0f} ms "
            f"(read functions); brute force {point['brute_force']['hot']['seconds']:.1f} s / "
            f"{point['brute_force']['last']['seconds']:.1f} s"
        )
        if sizes.freshness_every_size or size == sizes.posts[-1]:
            point["freshness"] = sink_freshness(database, ledger, str(size))
            say(
                f"freshness at {size:,} posts: rank 1 {point['freshness']['commit_to_rank_1_s']:.2f} s after the commit"
            )
            if size != sizes.posts[-1]:
                point["fold_after_freshness"] = {
                    k: round(v, 2) if isinstance(v, float) else v for k, v in run_fold(fresh).items()
                }
        points.append(point)
    streamed = streaming_freshness(fresh, database, ledger, log_dir) if sizes.streaming_freshness else None
    first, last = points[0], points[-1]
    timed = "command_s" if cli else "read_s"
    return {
        "k": K,
        "window_hours": WINDOW_HOURS,
        "half_life_hours": HALF_LIFE_HOURS,
        "window_s": WINDOW_S,
        "timed": "the upvotes command (subprocess)"
        if cli
        else "the read functions in-process (upvotes top has no --by/--last yet)",
        "cli": cli,
        "points": points,
        "ratios": {
            by: {
                "time": round(last[by][timed] / first[by][timed], 3),
                "read_time": round(last[by]["read_s"] / first[by]["read_s"], 3),
                "rows_read": round(last[by]["rows_read"] / first[by]["rows_read"], 3),
                "considered": round(last[by]["considered"] / first[by]["considered"], 3),
                "brute_force_time": round(last["brute_force"][by]["seconds"] / first["brute_force"][by]["seconds"], 3),
            }
            for by in ("hot", "last")
        },
        "rank_errors": sum(
            p[by]["rank_errors"] + p[by].get("command_rank_errors", 0) for p in points for by in ("hot", "last")
        )
        + sum(p["freshness"]["rank_errors"] for p in points if "freshness" in p),
        "exact": all(p[by]["exact"] and p[by]["counts_exact"] for p in points for by in ("hot", "last"))
        and (streamed is None or streamed["counts_exact"]),
        "streaming_freshness": streamed,
        "cost": cost,
    }


# --- sizes and report ------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    posts: tuple[int, ...]  # catalogue sizes, one database growing through them
    repetitions: int  # runs of each command per size (median) ...
    read_repetitions: int  # ... and calls of each read function (median), each ...
    budget_s: float  # ... until this many seconds are spent (at least one)
    seed_threads: int
    freshness_every_size: bool  # else at the largest only (then no fold between sizes)
    streaming_freshness: bool  # the real streaming pipeline at the largest size
    cost_windows: int  # the sink and fold cost workload: windows ...
    cost_hot_votes: int  # ... the hot post's votes in each ...
    cost_tail_deltas: int  # ... and the tail's deltas in each, over
    cost_posts: int  # ... this many posts


FULL = Sizes(
    posts=(10_000, 100_000, 1_000_000),
    repetitions=5,
    read_repetitions=10,
    budget_s=60.0,
    seed_threads=3,
    freshness_every_size=True,
    streaming_freshness=True,
    cost_windows=6,
    cost_hot_votes=1_000,
    cost_tail_deltas=500,
    cost_posts=5_000,
)
QUICK = Sizes(
    posts=(1_000, 4_000),
    repetitions=2,
    read_repetitions=3,
    budget_s=10.0,
    seed_threads=2,
    freshness_every_size=False,
    streaming_freshness=False,
    cost_windows=2,
    cost_hot_votes=500,
    cost_tail_deltas=150,
    cost_posts=500,
)


def _commands(t: dict) -> str:
    return "the whole command" if t["cli"] else "the read function (upvotes top has no --by/--last yet)"


def targets(document: dict) -> list[dict]:
    t = document["benchmarks"]["trending"]
    first, last = t["points"][0], t["points"][-1]
    timed = "command_s" if t["cli"] else "read_s"
    span = f"{last['posts']:,} vs {first['posts']:,} posts"
    found = []
    for by, name in (("hot", "`top --by hot -n 10`"), ("last", f"`top --last {t['window_hours']}h -n 10`")):
        r = t["ratios"][by]
        found.append(
            target(
                f"{name}: {_commands(t)}'s time and rows read, {last['posts']:,} posts <= 1.5x {first['posts']:,}",
                f"time {r['time']:.2f}x ({last[by][timed]:.3f} s vs {first[by][timed]:.3f} s, {span}); rows read "
                f"{first[by]['rows_read']:,} -> {last[by]['rows_read']:,} ({r['rows_read']:.2f}x); brute force, same run: "
                f"{last['brute_force'][by]['seconds']:.1f} s ({last['brute_force'][by]['best']}, "
                f"{last['brute_force'][by]['rows']:,} rows): {last[by]['x_brute_force']:,.2f}x the command's time, "
                f"{last[by]['x_brute_force_read']:,.2f}x the read function's, at {last['posts']:,} posts",
                r["time"] <= 1.5 and r["rows_read"] <= 1.5,
            )
        )
    found.append(
        target(
            "Trending rank errors against the ledger's brute-force ranking: 0",
            f"{t['rank_errors']} (every size, both rankings, {'commands and ' if t['cli'] else ''}read functions, "
            f"after the freshness writes); every answer certified: {'yes' if t['exact'] else 'NO'}",
            t["rank_errors"] == 0 and t["exact"],
        )
    )
    fresh = [p["freshness"] for p in t["points"] if "freshness" in p]
    limit = 2 * t["window_s"] + 1
    streamed = t.get("streaming_freshness")
    if streamed:
        worst = streamed["publish_to_rank_1_s"]
        measured = (
            f"through `upvotes stream` ({t['window_s']} s windows): {worst:.1f} s from the first publish; "
            f"through the sink's commit, no fold: "
            + ", ".join(f"{f['commit_to_rank_1_s']:.2f} s" for f in fresh)
            + " after the commit"
        )
    else:
        worst = t["window_s"] + max(f["commit_to_rank_1_s"] for f in fresh)
        measured = (
            f"{t['window_s']} s window + "
            + ", ".join(f"{f['commit_to_rank_1_s']:.2f} s" for f in fresh)
            + " from the sink's commit to rank 1, no fold (no streaming run at this size)"
        )
    found.append(
        target(
            f"A post made viral now reaches hot rank 1 within 2 windows + 1 s ({limit} s), no fold",
            measured,
            worst <= limit,
        )
    )
    cost = t["cost"]["sink_and_fold"]
    found.append(
        target(
            "Sink and fold mutations per 1,000 votes with the hot ranking: at most +10%",
            f"{cost['before_per_1k_votes']:,.0f} -> {cost['after_per_1k_votes']:,.0f} ({cost['ratio'] - 1:+.1%}; sink "
            f"{t['cost']['sink']['ratio'] - 1:+.1%}, fold {t['cost']['fold']['ratio'] - 1:+.1%}); before: "
            f"{t['cost']['before_from']}",
            cost["ratio"] <= 1.10,
        )
    )
    return found


def markdown(document: dict) -> list[str]:
    t = document["benchmarks"]["trending"]
    rows = []
    for p in t["points"]:
        for by, name in (("hot", "--by hot"), ("last", f"--last {t['window_hours']}h")):
            r, brute = p[by], p["brute_force"][by]
            rows.append(
                [
                    f"{p['posts']:,}",
                    f"{p['hourly_rows']:,}",
                    name,
                    f"{r['command_s']:.2f}" if "command_s" in r else "-",
                    f"{r['read_s'] * 1000:,.0f}",
                    f"{r['considered']} / {r['candidate_rows']} / {r['rows_read']:,}",
                    f"{brute['seconds']:,.2f} ({brute['best']}, {brute['rows']:,} rows)",
                    f"{r['x_brute_force']:,.2f}x / {r['x_brute_force_read']:,.2f}x",
                    f"{r['rank_errors']}" + (f" / {r['command_rank_errors']}" if "command_rank_errors" in r else ""),
                    "yes" if r["exact"] and r["counts_exact"] else "NO",
                ]
            )
    fresh_rows = [
        [
            f"{p['posts']:,}",
            "sink commit (write_deltas), no fold",
            f"{p['freshness']['votes_per_pane']:,}",
            f"{p['freshness']['panes']}",
            f"{p['freshness']['commit_to_rank_1_s']:.2f} s after the commit",
            f"{p['freshness']['rank_errors']}",
        ]
        for p in t["points"]
        if "freshness" in p
    ]
    if t.get("streaming_freshness"):
        s = t["streaming_freshness"]
        fresh_rows.append(
            [
                f"{t['points'][-1]['posts']:,}",
                f"`upvotes stream`, {t['window_s']} s windows, no fold",
                f"{s['votes']:,}",
                f"{s['messages']} messages",
                f"{s['publish_to_rank_1_s']:.2f} s after the first publish",
                "-",
            ]
        )
    c = t["cost"]
    cost_rows = [
        [
            name.replace("_and_", " and "),
            f"{c[name]['before_commits']:,} / {c[name]['commits']:,}",
            f"{c[name]['before_per_1k_votes']:,.1f}",
            f"{c[name]['after_per_1k_votes']:,.1f}",
            f"{c[name]['ratio'] - 1:+.1%}",
            f"{c[name]['model_per_1k_votes']:,.1f} ({c[name]['model_ratio'] - 1:+.1%})",
        ]
        for name in ("sink", "fold", "sink_and_fold")
    ]
    brute_rows = [
        [
            f"{p['posts']:,}",
            by,
            name,
            "refused" if cfg["seconds"] is None else f"{cfg['seconds']:,.2f}",
            f"{cfg['rows']:,}",
            cfg.get("failed", f"{cfg['rank_errors']}"),
        ]
        for p in t["points"]
        for by in ("hot", "last")
        for name, cfg in p["brute_force"][by]["configurations"].items()
    ]
    return [
        f"What is viral now: `upvotes top --by hot` and `--last {t['window_hours']}h`, -n {t['k']}, as the catalogue "
        f"grows (half-life {t['half_life_hours']:g} h; timed: {t['timed']})",
        table(
            [
                "Posts",
                "Hourly rows",
                "top",
                "Command s (median)",
                "Read ms (median)",
                "Considered / candidate rows / rows read",
                "Brute force s (best, rows scanned)",
                "Brute force time / command's, / read's",
                "Rank errors (read / command)",
                "Certified, counts exact",
            ],
            rows,
        ),
        "Brute-force configurations (each ranking's baseline is the fastest with no rank error):",
        table(["Posts", "Ranking", "Configuration", "Seconds", "Rows scanned", "Rank errors"], brute_rows),
        f"Freshness: a post made viral now ({t['window_s']} s windows), hot_top polled every "
        f"{FRESH_POLL_S * 1000:.0f} ms until certified rank 1:",
        table(["Posts", "Path", "Votes (per pane)", "Panes", "To hot rank 1", "Rank errors"], fresh_rows),
        f"Sink and fold mutations per 1,000 votes ({c['votes']:,} votes in {c['windows']} windows: a hot post and a "
        f"long tail on random hours of 30 days, {c['delta_rows']:,} delta rows, then one fold of {c['posts_folded']:,} "
        f"posts), by the DDL mutation model; before: {c['before_from']} (bench/fixtures/posts_before_issue_36.sql); "
        "the last column isolates the schema: this code's commits counted on that schema, the new columns dropped:",
        table(
            [
                "Commits of",
                "Commits before / after",
                "Before",
                "After",
                "Change",
                "This code's commits on the old schema (change)",
            ],
            cost_rows,
        ),
    ]


def chart(document: dict) -> list:
    t = document["benchmarks"]["trending"]
    posts = [p["posts"] for p in t["points"]]
    timed = "command_s" if t["cli"] else "read_s"

    def against_brute_force(ax, ours: str, label: str, brute: str, brute_label: str, unit: str, what: str) -> None:
        """Log-log, per ranking: our figure and the brute force's, as the catalogue grows."""
        for by, style in (("hot", "o-"), ("last", "s-")):
            ax.plot(posts, [p[by][ours] for p in t["points"]], style, label=f"top {by}{label}")
            ax.plot(
                posts,
                [p["brute_force"][by][brute] for p in t["points"]],
                style.replace("-", "--"),
                label=f"{by}: brute force{brute_label}",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("posts")
        ax.set_ylabel(unit)
        ax.set_title(f"trending: {what} vs catalogue")
        ax.legend(fontsize=7)

    def times(ax) -> None:
        against_brute_force(ax, timed, f" ({timed[:-2]})", "seconds", " (best)", "seconds", "time")

    def rows_read(ax) -> None:
        against_brute_force(ax, "rows_read", ": rows read", "rows", " rows", "rows", "rows read")

    def cost(ax) -> None:
        c = t["cost"]
        names = ["sink", "fold", "sink_and_fold"]
        xs = range(len(names))
        ax.bar([x - 0.2 for x in xs], [c[n]["before_per_1k_votes"] for n in names], 0.4, label="before issue 36")
        ax.bar([x + 0.2 for x in xs], [c[n]["after_per_1k_votes"] for n in names], 0.4, label="after")
        ax.set_xticks(list(xs), [n.replace("_and_", " + ") for n in names])
        ax.set_ylabel("mutations per 1,000 votes")
        ax.set_title("trending: sink and fold cost")
        ax.legend(fontsize=7)

    return [times, rows_read, cost]


BENCHMARK = Benchmark(
    name="trending",
    title="What is viral now: `upvotes top --by hot` and `--last 24h` as the catalogue grows",
    full=FULL,
    quick=QUICK,
    run=run,
    markdown=markdown,
    targets=targets,
    chart=chart,
)
