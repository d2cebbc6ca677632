"""Where a race burst's time goes (bench/write_back.py's race): one breakdown per approach, from
the first send to the exact read that sees the last vote.

The race starts every burst at set phases of the 2 s beat that both approaches share: the
pipeline's fixed windows end, and the write-back flusher flushes, at wall-clock multiples of
RACE_WINDOW_S (`wait_for_phase`). Each burst then gives:

- on the sender: generating the events, encoding them (the pipeline's messages; the write-back's
  command pipeline, which redis-py packs as it sends) and the rest of the send, to the last
  acknowledgement;
- after the last acknowledgement, the critical path, from timestamps: the wait for the window
  end (pipeline: the end of the last pane, read from its DeltaId) or for the flush that takes the
  last votes (write-back: its start, from the flusher's log); then the pipeline's fire and first
  commit (window end -> that pane's first commit timestamp) and its other commits (-> its last
  commit timestamp), or the flusher's read (RENAME, HGETALL), sums and commit (its log); then the
  read that sees the count (-> the exact read's end);
- the pipeline's pull and its parse and sum are not on that path (they run while the sender
  sends), so they are measured beside it, on the burst's own messages: published again to a
  topic of their own after the race, pulled as the local reader pulls (`pull_and_parse`), and
  summed by the chain's BundleSums, in this process.

Every figure is in seconds, averaged over the phases (`mean_stages`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence

from google.cloud import pubsub_v1
from google.cloud.spanner_v1 import param_types

from bench.config import RACE_WINDOW_S
from local_runner.pubsub_reader import pull_bundle, subscriber_client
from schemas.contract import DEFAULT_EVENT_TIME_POLICY, Message
from schemas.delta_ids import pane_window_end_us
from transforms.parse_and_sum import BundleSums
from upvotes.devtools.publishing import publish_message

PANES_SQL = """SELECT DeltaId, MIN(CommittedAt), MAX(CommittedAt), COUNT(*), COUNT(DISTINCT CommittedAt)
FROM PostDeltas WHERE STARTS_WITH(PostId, @prefix) GROUP BY DeltaId"""
# The stages in table order: (key, label, on the critical path after the last acknowledgement).
PIPELINE_STAGES = (
    ("generate_s", "generate the events", False),
    ("encode_s", "encode them (messages / command pipeline)", False),
    ("send_rest_s", "publish / send, the rest, to the last acknowledgement", False),
    ("pull_s", "pull (pipeline: the burst's messages, as the local reader pulls them)", False),
    ("parse_sum_s", "parse and sum (pipeline: BundleSums over the burst's messages)", False),
    ("window_wait_s", "wait for the window end / the flush, after the last acknowledgement", True),
    ("fire_s", "window end -> its first commit (fire, first commit) / flush: RENAME, HGETALL, sums", True),
    ("commit_s", "the last window's other commits / the flush's commit", True),
    ("read_s", "the read that sees the count (last commit -> exact read)", True),
)


def wait_for_phase(phase_s: float, beat_s: float = RACE_WINDOW_S, margin_s: float = 0.5) -> None:
    """Sleeps until the wall clock is `phase_s` past a multiple of `beat_s` (when windows end and
    the flusher flushes), at least `margin_s` from now."""
    now = time.time()
    start = (now // beat_s) * beat_s + phase_s
    while start < now + margin_s:
        start += beat_s
    time.sleep(start - now)


def pipeline_critical_path(database, prefix: str, last_ack_at: float, exact_at: float) -> dict:
    """The pipeline's stages after the last acknowledgement, from the burst's delta rows: its last
    pane's window end and commit timestamps."""
    with database.snapshot() as snapshot:
        panes = [
            (end_us, first, last, rows, commits)
            for delta_id, first, last, rows, commits in snapshot.execute_sql(
                PANES_SQL, params={"prefix": prefix}, param_types={"prefix": param_types.STRING}
            )
            if (end_us := pane_window_end_us(delta_id)) is not None
        ]
    end_us, first, last, rows, commits = max(panes, key=lambda p: p[0])
    window_end = end_us / 1e6
    return {
        "window_wait_s": window_end - last_ack_at,
        "fire_s": first.timestamp() - window_end,
        "commit_s": last.timestamp() - first.timestamp(),
        "read_s": exact_at - last.timestamp(),
        "last_window_rows": rows,
        "last_window_commits": commits,
    }


def flusher_critical_path(flushes: Sequence[Mapping], last_ack_at: float, exact_at: float) -> dict:
    """The write-back's stages after the last acknowledgement, from the flusher's log: the first
    flush that started after it took the last votes."""
    flush = min((f for f in flushes if f.get("started_at", 0) >= last_ack_at), key=lambda f: f["started_at"])
    ended = flush["started_at"] + flush["read_s"] + flush["sum_s"] + flush["commit_s"]
    return {
        "window_wait_s": flush["started_at"] - last_ack_at,
        "fire_s": flush["read_s"] + flush["sum_s"],
        "pull_s": flush["read_s"],
        "parse_sum_s": flush["sum_s"],
        "commit_s": flush["commit_s"],
        "read_s": exact_at - ended,
        "last_window_rows": flush["posts"],
        "last_window_commits": flush["parts"],
    }


def pull_and_parse(project: str, topic: str, messages: Sequence[Message]) -> dict:
    """The burst's `messages`, published to `topic` (new, with a subscription of its own) and
    pulled as the local reader pulls (local_runner/pubsub_reader.py `pull_bundle`), then summed by
    the chain's BundleSums one bundle at a time: seconds of each, and the votes summed (checked by
    the caller)."""
    publisher, subscriber = pubsub_v1.PublisherClient(), subscriber_client()
    topic_path = publisher.topic_path(project, topic)
    subscription = subscriber.subscription_path(project, f"{topic}-sub")
    publisher.create_topic(name=topic_path)
    subscriber.create_subscription(name=subscription, topic=topic_path, ack_deadline_seconds=60)
    for future in [publish_message(publisher, topic_path, m.data, m.attributes) for m in messages]:
        future.result(timeout=60)
    bundles: list[list] = []
    started = time.perf_counter()
    while sum(len(b) for b in bundles) < len(messages):
        bundle, _ = pull_bundle(subscription)
        if bundle:
            bundles.append(bundle)
    pull_s = time.perf_counter() - started
    votes, started = 0, time.perf_counter()
    for bundle in bundles:
        sums = BundleSums()
        for received in bundle:
            published = received.message.publish_time
            sums.add_message(
                received.message.data,
                dict(received.message.attributes),
                published.seconds + published.nanos / 1e9,
                DEFAULT_EVENT_TIME_POLICY,
                lambda _: None,
            )
        votes += sums.votes
        list(sums.emit(time.time()))
    parse_sum_s = time.perf_counter() - started
    publisher.delete_topic(topic=topic_path)
    subscriber.delete_subscription(subscription=subscription)
    return {"pull_s": pull_s, "parse_sum_s": parse_sum_s, "votes": votes}


def mean_stages(bursts: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each stage's mean over the bursts (phases) that have it."""
    keys = {key for burst in bursts for key in burst}
    return {key: statistics.fmean(burst[key] for burst in bursts if key in burst) for key in sorted(keys)}
