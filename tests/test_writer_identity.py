"""Writer identity: a drained-and-relaunched job never reuses its predecessor's delta keys, and
an in-place update keeps them, on the Spanner emulator through the real Beam transforms.

The window is deliberately longer than the whole test (10^9 s), so every run's pane is the
same window and pane index: without generations, the relaunch's delta keys would equal the
first run's and the sink would take its votes as already written.
"""

from __future__ import annotations

import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.transforms.window import TimestampedValue
from google.cloud import spanner

from pipeline.streaming import claim_writer
from schemas.counters import Counts
from schemas.delta_ids import FIRST_KEY_FORMAT, KEY_FORMAT, shards_of_key, sum_shard, writer_identity
from schemas.records import CounterSums, PostHour
from spanner_reads.reads import exact_counts
from spanner_store.tables import DELTAS, WRITER_GENERATIONS, post_key
from spanner_writes.writers import claim_generation
from transforms.parse_and_sum import ShardSums
from transforms.spanner_sink import WriteDeltaRows
from transforms.windowing import WindowAndSumVotes

HOUR = 1_795_312_800
LONG_WINDOW_S = 10**9


def launch_claim(stack, job_name: str, update: bool):
    """What pipeline.streaming.build claims for a launch with these options."""
    flags = [f"--job_name={job_name}"] + (["--update"] if update else [])
    return claim_writer(PipelineOptions(flags), stack.project, stack.instance, stack.database)


def run_votes(stack, writer: str, votes: list[tuple[int, ShardSums]]) -> None:
    """One streaming run's window-and-write half, with the writer identity its launch claimed: the
    parsed sums stamped with their ingestion time (now), as ParseVotes emits them."""
    ingested = time.time()
    with TestPipeline() as p:
        (
            p
            | beam.Create(votes)
            | beam.Map(lambda sums: TimestampedValue(sums, ingested))
            | WindowAndSumVotes(writer, LONG_WINDOW_S)
            | WriteDeltaRows(stack.project, stack.instance, stack.database, rows_per_commit=50)
        )


def delta_ids(database, post_id: str) -> list[str]:
    with database.snapshot() as snapshot:
        rows = snapshot.read(
            DELTAS,
            columns=("DeltaId",),
            keyset=spanner.KeySet(
                ranges=[spanner.KeyRange(start_closed=list(post_key(post_id)), end_closed=list(post_key(post_id)))]
            ),
        )
        return sorted(r[0] for r in rows)


def upvotes(post_id: str, n: int) -> list[tuple[int, ShardSums]]:
    """n single upvotes, as n bundles' sums, keyed by the post's shard."""
    return [(sum_shard(post_id), {PostHour(post_id, HOUR): CounterSums(Counts(upvotes=1), 1)}) for _ in range(n)]


def test_a_fresh_launch_takes_a_new_generation_and_an_update_keeps_it(database) -> None:
    assert claim_generation(database, "gen-job", update=False).generation == 1
    assert claim_generation(database, "gen-job", update=False).generation == 2
    kept = claim_generation(database, "gen-job", update=True)
    assert (kept.generation, kept.identity) == (2, writer_identity("gen-job", 2))
    assert claim_generation(database, "gen-job", update=False).generation == 3


def test_an_update_of_a_job_launched_before_generations_keeps_its_bare_name(database) -> None:
    claim = claim_generation(database, "pre-generations-job", update=True)
    assert (claim.generation, claim.identity) == (0, "pre-generations-job")
    assert claim_generation(database, "pre-generations-job", update=False).generation == 1


def test_drain_and_relaunch_within_one_window_counts_both_runs_and_an_update_replay_once(stack, database) -> None:
    post = "relaunched-post"
    first = launch_claim(stack, "upvotes-streaming", update=False)
    run_votes(stack, first.identity, upvotes(post, 3))

    # Drained, then launched again under the same name: same window, same pane index.
    relaunch = launch_claim(stack, "upvotes-streaming", update=False)
    assert relaunch.identity != first.identity
    run_votes(stack, relaunch.identity, upvotes(post, 2))
    ids = delta_ids(database, post)
    assert len(ids) == 2
    assert {i.split(":", 1)[1] for i in ids} == {ids[0].split(":", 1)[1]}  # same window and pane: a collision before
    assert exact_counts(database, [post])[0].counts.upvotes == 5  # counted once each

    # An in-place update keeps the relaunch's identity; the pane it replays collides.
    updated = launch_claim(stack, "upvotes-streaming", update=True)
    assert updated.identity == relaunch.identity
    run_votes(stack, updated.identity, upvotes(post, 2))
    assert delta_ids(database, post) == ids
    assert exact_counts(database, [post])[0].counts.upvotes == 5  # the replayed pane counted once


# --- an update that changes the window length or the shard count ------------------------------


def run_layouts(stack, writer: str, key_format: int, layouts: list[tuple[int, list[tuple[int, ShardSums]]]]) -> None:
    """Panes of several window lengths over the same start (0) for one writer, as an update that
    changed `windowSeconds` leaves them: windows of the old length, buffered, are finished by the
    new job beside its own."""
    with TestPipeline() as p:
        for length, votes in layouts:
            (
                p
                | f"Votes{length}" >> beam.Create(votes)
                | f"Stamp{length}" >> beam.Map(lambda sums: TimestampedValue(sums, 1))
                | f"Window{length}" >> WindowAndSumVotes(writer, length, key_format)
                | f"Write{length}" >> WriteDeltaRows(stack.project, stack.instance, stack.database, rows_per_commit=50)
            )


def test_panes_of_10_s_and_20_s_windows_of_one_writer_post_and_start_both_count(stack, database) -> None:
    claim = launch_claim(stack, "resized-job", update=False)
    assert claim.key_format == KEY_FORMAT
    post = "resized-post"
    run_layouts(stack, claim.identity, claim.key_format, [(10, upvotes(post, 3)), (20, upvotes(post, 4))])
    assert len(delta_ids(database, post)) == 2
    assert (
        exact_counts(database, [post])[0].counts.upvotes == 7
    )  # the first format took the 20 s pane as already written


def test_panes_of_two_shard_counts_of_one_window_both_count(stack, database) -> None:
    claim = launch_claim(stack, "reshard-job", update=False)
    post = "resharded-post"
    old = [(sum_shard(post), {PostHour(post, HOUR): CounterSums(Counts(upvotes=1), 1)}) for _ in range(3)]
    new = [(sum_shard(post, shards=64), {PostHour(post, HOUR): CounterSums(Counts(upvotes=1), 1)}) for _ in range(5)]
    assert shards_of_key(old[0][0]) == 32 and shards_of_key(new[0][0]) == 64
    run_layouts(stack, claim.identity, claim.key_format, [(10, old + new)])
    assert len(delta_ids(database, post)) == 2
    assert exact_counts(database, [post])[0].counts.upvotes == 8


def test_an_update_keeps_the_key_format_of_its_generation_and_a_fresh_launch_takes_the_new_one(stack, database) -> None:
    with database.batch() as batch:  # a generation claimed before formats existed
        batch.insert(
            WRITER_GENERATIONS,
            columns=("WriterName", "Generation", "ClaimedAt"),
            values=[("old-format-job", 4, spanner.COMMIT_TIMESTAMP)],
        )
    updated = launch_claim(stack, "old-format-job", update=True)
    assert (updated.generation, updated.key_format) == (4, FIRST_KEY_FORMAT)
    post = "old-format-post"
    run_layouts(stack, updated.identity, updated.key_format, [(10, upvotes(post, 2))])
    # The key the job before the update wrote for this pane: a replay collides with it.
    assert delta_ids(database, post) == [f"{updated.identity}:0:0"]
    assert launch_claim(stack, "old-format-job", update=True).key_format == FIRST_KEY_FORMAT
    relaunched = launch_claim(stack, "old-format-job", update=False)
    assert (relaunched.generation, relaunched.key_format) == (5, KEY_FORMAT)
    assert launch_claim(stack, "old-format-job", update=True).key_format == KEY_FORMAT
