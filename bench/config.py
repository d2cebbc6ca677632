"""Benchmark sizes: the full run (about 25 minutes on 2 cores) and the --quick smoke run."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Mapping

from upvotes.devtools.workload import Workload


@dataclass(frozen=True)
class Sizes:
    """Every size the benchmarks use; `asdict` goes into the results as they ran."""

    name: str
    # hot_post
    sweep_seconds: float  # per read-modify-write / sharded configuration
    sweep_threads: tuple[int, ...]  # writer threads tried, each with both retry policies
    chain_votes: int  # through the in-memory chain and sink; RSS sampled every tenth
    e2e_votes: int  # end to end through Pub/Sub, a viral burst
    e2e_posts: int
    soak_short_s: int  # streaming peak RSS after this long under a steady load ...
    soak_long_s: int  # ... and after this long
    reads: int  # total-read latency samples per approach
    # transform_cost
    transform_events: int
    transform_posts: int
    profile_events: int
    # write_amplification
    amplification_votes: int
    amplification_posts: int
    arrival_rate: int  # votes per second of simulated ingestion time
    pipeline_sample: int  # the real WindowAndSumVotes runs over 1 in this many posts
    # fold_scaling
    fold_deltas: tuple[int, ...]
    read_old_deltas: tuple[int, ...]
    fold_reads: int
    # freshness
    fresh_rate: int  # events per second
    fresh_seconds: int
    fresh_window_s: int
    # hot_reads
    hot_read_callers: int
    hot_read_rates: tuple[int, ...]  # combined target reads/s of the one hot post
    hot_read_seconds: float  # per point
    # catalogue_cost
    catalogue_posts: tuple[int, ...]  # catalogue sizes, the same work at each
    catalogue_rounds: int  # rounds of the work per size (medians of their timings)
    # stream_reader
    single_event_messages: int  # one vote each, through Beam's reader and the project's
    kill_rate: int  # votes/s of the steady batched load a SIGKILL hits
    kill_seconds: int
    # fault_soak
    fault_soak_rate: int  # votes/s, batched
    fault_soak_seconds: int
    # write_back (the race's burst is e2e_votes over e2e_posts, as hot_post's end to end)
    unpipelined_votes: int = 20_000  # one HINCRBY per vote, into Redis only
    crash_rate: int = 2_000  # votes/s of the steady load each crash row runs under
    crash_seconds: float = 20.0  # of steady load; the SIGKILL falls at a seeded time in its middle third
    # The pipeline's row waits this long for counts that are not exact yet: past the subscription's
    # 60 s ack deadline, so a redelivery after the kill is seen (and counted, if it counts twice).
    crash_settle_s: float = 75.0
    # vote_states (its races are e2e_votes events on one post and over e2e_posts posts, as hot_post's burst)
    state_voters: int = 100_000  # the users a race's vote states come from
    state_soak_short_s: int = 60  # the stream's peak RSS under a steady hot-post state load after this long ...
    state_soak_long_s: int = 180  # ... and after this long
    state_stop_rate: int = 2_000  # votes/s of the state load a SIGTERM and a restart of the stream fall in
    state_stop_seconds: float = 30.0

    def as_dict(self) -> dict:
        return asdict(self)


FULL = Sizes(
    name="full",
    sweep_seconds=4.0, sweep_threads=(1, 2, 4, 8), chain_votes=1_000_000, e2e_votes=100_000, e2e_posts=1_000,
    soak_short_s=60, soak_long_s=300, reads=50,
    transform_events=2_000_000, transform_posts=1_000, profile_events=100_000,
    amplification_votes=1_000_000, amplification_posts=100_000, arrival_rate=50_000, pipeline_sample=10,
    fold_deltas=(10_000, 30_000, 100_000), read_old_deltas=(0, 10_000, 100_000), fold_reads=100,
    fresh_rate=100, fresh_seconds=60, fresh_window_s=2,
    hot_read_callers=32, hot_read_rates=(1_000, 10_000), hot_read_seconds=5.0,
    catalogue_posts=(10_000, 100_000, 1_000_000), catalogue_rounds=3,
    single_event_messages=4_200, kill_rate=2_000, kill_seconds=30,
    fault_soak_rate=2_000, fault_soak_seconds=120,
)

QUICK = Sizes(
    name="quick",
    sweep_seconds=0.5, sweep_threads=(1, 4), chain_votes=50_000, e2e_votes=10_000, e2e_posts=200,
    soak_short_s=2, soak_long_s=6, reads=20,
    transform_events=20_000, transform_posts=1_000, profile_events=5_000,
    amplification_votes=100_000, amplification_posts=10_000, arrival_rate=5_000, pipeline_sample=10,
    fold_deltas=(1_000, 3_000), read_old_deltas=(0, 1_000, 3_000), fold_reads=10,
    fresh_rate=100, fresh_seconds=6, fresh_window_s=2,
    hot_read_callers=32, hot_read_rates=(1_000, 10_000), hot_read_seconds=1.0,
    unpipelined_votes=2_000, crash_seconds=4.0, crash_settle_s=4.0,
    catalogue_posts=(1_000, 10_000), catalogue_rounds=1,
    single_event_messages=800, kill_rate=1_000, kill_seconds=5,
    fault_soak_rate=1_000, fault_soak_seconds=20,
    state_voters=10_000, state_soak_short_s=2, state_soak_long_s=6, state_stop_rate=1_000, state_stop_seconds=8.0,
)


# The race's viral burst, the same for every approach that takes votes through a buffer
# (bench/hot_post.py's end to end, bench/write_back.py): RACE_WINDOW_S is the pipeline's window
# there and the write-back flusher's interval, so that their freshness compares.
RACE_WINDOW_S = 2
RACE_ZIPF = 1.2


def race_workload(sizes: Sizes, prefix: str, fractions: Mapping[str, float] | None = None) -> Workload:
    """sizes.e2e_votes votes over sizes.e2e_posts posts named <prefix><rank>, Zipf RACE_ZIPF;
    `fractions` as Workload's (None: the default mix)."""
    return Workload(events=sizes.e2e_votes, posts=sizes.e2e_posts, zipf=RACE_ZIPF, seed=13, post_prefix=prefix,
                    fractions=fractions or {})
