"""`upvotes status`: the health of a deployment as one report, and whether it crosses a threshold.

What it reads (spanner_reads/health.py), in one strong read-only snapshot: the fold cursor
(the FoldRuns row with the largest ChangesThrough, and its skipped posts), the DeltaCommits rows
committed since the cursor or the last 10 minutes, whichever is older, and for the posts those
rows name, their watermarks and unfolded deltas; with a dead-letter topic, up to
`--dead-letter-limit` messages of its kept subscription, pulled and released unacknowledged.
Its cost follows what is unfolded and recent, not the number of posts (`rows_read` says how much).
And whether the stream runs (`liveness_report`): each local stream's heartbeat, which a stream
rewrites at least once per window, idle or not (a stream that missed 3 of its windows is dead:
`heartbeat_problems`), the last delta commit (spanner_reads/liveness.py) and the age of the votes
subscription's oldest unacknowledged message (upvotes/operations/backlog.py; the 300 s threshold of
the production alert, for a Dataflow job, which writes no heartbeat). And the votes that arrived late, from the streaming job's lateness
counters (upvotes/operations/late_votes.py). The subscriptions are those `upvotes provision` recorded
(upvotes/operations/watches.py) unless flags name others; a check that cannot be made is a problem,
never healthy.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from spanner_reads.health import DeltaHealth
from spanner_reads.liveness import DEAD, DEAD_AFTER_WINDOWS, StreamHeartbeat
from spanner_store.tables import DELTA_RETENTION_DAYS
from upvotes.deploy.deploy_config import DeployConfig
from upvotes.operations.backlog import Backlog
from upvotes.operations.late_votes import DEFAULT_MAX_LATE_VOTES, LateVotes

EXIT_HEALTHY = 0
EXIT_THRESHOLD_CROSSED = 3


@dataclass(frozen=True)
class Thresholds:
    max_fold_lag_s: float
    # An unfolded delta this old is a post the fold has skipped (or a fold broken) for long enough
    # that, left alone, the row deletion policy will delete votes nobody counted.
    max_unfolded_age_s: float = float(DeployConfig.alert_unfolded_age_s)
    max_dead_letters: int = 0
    max_backlog_age_s: float = 300.0  # votes waiting unread longer: the stream is down or behind
    max_late_votes: float = float(DEFAULT_MAX_LATE_VOTES)  # over late_votes.LOOKBACK_S


def _age_s(now: datetime, then: datetime | None) -> float | None:
    return None if then is None else round((now - then).total_seconds(), 3)


def status_report(health: DeltaHealth, dead_letter_backlog: dict[str, int] | None) -> dict:
    """The report `upvotes status` prints, as of the health snapshot's read time."""
    minutes = health.recent_window.total_seconds() / 60
    return {
        "read_at": health.read_at.isoformat(),
        "posts_with_unfolded_deltas": health.posts_with_unfolded_deltas,
        "last_fold_snapshot": None if health.last_fold_snapshot is None else health.last_fold_snapshot.isoformat(),
        "last_fold_age_s": _age_s(health.read_at, health.last_fold_snapshot),
        "unfolded_deltas": health.unfolded_deltas,
        "oldest_unfolded_age_s": _age_s(health.read_at, health.oldest_unfolded_commit),
        "oldest_unfolded_share_of_retention": None
        if health.oldest_unfolded_commit is None
        else round(
            (health.read_at - health.oldest_unfolded_commit).total_seconds() / (DELTA_RETENTION_DAYS * 86_400), 4
        ),
        "delta_rows_per_min": round(health.recent_delta_rows / minutes, 2),
        "votes_per_min": round(health.recent_votes / minutes, 2),
        "dead_letter_backlog": dead_letter_backlog,
        "retention_days": DELTA_RETENTION_DAYS,
        "rows_read": health.rows_read,
        "full_scan": health.full_scan,
    }


def problems(report: dict, thresholds: Thresholds) -> list[str]:
    """Each threshold the report crosses, in words; empty when healthy."""
    found = []
    fold_age = report["last_fold_age_s"]
    if fold_age is None and report["unfolded_deltas"]:
        found.append("no fold has ever finished, and there are unfolded deltas")
    elif fold_age is not None and fold_age > thresholds.max_fold_lag_s:
        found.append(f"last fold finished {fold_age:.0f} s ago (threshold {thresholds.max_fold_lag_s:.0f} s)")
    oldest = report["oldest_unfolded_age_s"]
    if oldest is not None and oldest > thresholds.max_unfolded_age_s:
        found.append(
            f"an unfolded delta is {oldest:.0f} s old (threshold {thresholds.max_unfolded_age_s:.0f} s; "
            f"delta rows are deleted {report['retention_days']} days after their commit, folded or not)"
        )
    backlog = report["dead_letter_backlog"]
    if backlog is not None and sum(backlog.values()) > thresholds.max_dead_letters:
        found.append(f"{sum(backlog.values())} dead letters kept: " + ", ".join(f"{k}={v}" for k, v in backlog.items()))
    return found


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


def heartbeat_report(beat: StreamHeartbeat) -> dict:
    """One local stream's heartbeat, as `upvotes status` reports it."""
    return {
        "subscription": beat.subscription,
        "state": beat.state,
        "last_alive": _iso(beat.alive_at),
        "last_alive_age_s": round(beat.age_s, 3),
        "window_s": beat.window_seconds,
        "missed_windows": beat.missed_windows,
        "writer": beat.writer,
        "host": beat.host,
        "pid": beat.pid,
        "started_at": _iso(beat.started_at),
        "stopped_at": _iso(beat.stopped_at),
    }


def liveness_report(
    read_at: datetime,
    last_delta_commit: datetime | None,
    votes_backlog: Backlog | None,
    watching: dict[str, str],
    heartbeats: list[StreamHeartbeat] | None = None,
) -> dict:
    """The fields that say whether the stream runs, beside the fold lag (`streams`: each local
    stream's heartbeat; None when it could not be read)."""
    return {
        "streams": None if heartbeats is None else [heartbeat_report(beat) for beat in heartbeats],
        "last_delta_commit": None if last_delta_commit is None else last_delta_commit.isoformat(),
        "last_delta_commit_age_s": _age_s(read_at, last_delta_commit),
        "votes_backlog": None if votes_backlog is None else votes_backlog.as_dict(),
        "watching": watching,
    }


def heartbeat_problems(report: dict) -> list[str]:
    """Each local stream that missed DEAD_AFTER_WINDOWS of its windows, and when it was last alive."""
    return [
        f"the stream reading {stream['subscription']} is dead: no heartbeat for {stream['missed_windows']} of its "
        f"{stream['window_s']} s windows (threshold {DEAD_AFTER_WINDOWS}); last alive at {stream['last_alive']}, "
        f"{stream['last_alive_age_s']:.0f} s ago (writer {stream['writer']}, pid {stream['pid']} on "
        f"{stream['host']}). Start it again: it replays first what it left unfinished"
        for stream in report.get("streams") or ()
        if stream["state"] == DEAD
    ]


def liveness_problems(report: dict, thresholds: Thresholds) -> list[str]:
    """Votes waiting unread past the threshold, in words (with the last delta commit's age)."""
    backlog = report["votes_backlog"]
    age = None if backlog is None else backlog["oldest_unacked_age_s"]
    if age is None or age <= thresholds.max_backlog_age_s:
        return []
    last = report["last_delta_commit_age_s"]
    since = "no delta commit is kept" if last is None else f"the last delta commit was {last:.0f} s ago"
    return [
        f"votes wait unread: the oldest unacknowledged message of {backlog['subscription']} is {age:.0f} s old "
        f"(threshold {thresholds.max_backlog_age_s:.0f} s; {backlog['method']}); {since}: is the stream running?"
    ]


def late_votes_report(late_votes: LateVotes | None) -> dict:
    """The late votes of the streaming job (None: they could not be read)."""
    return {"late_votes": None if late_votes is None else late_votes.as_dict()}


def late_votes_problems(report: dict, thresholds: Thresholds) -> list[str]:
    """More late votes than the threshold, in words; a null count (the emulators) is none."""
    late = report["late_votes"]
    count = None if late is None else late["count"]
    if count is None or count <= thresholds.max_late_votes:
        return []
    counters = ", ".join(f"{name}={value}" for name, value in late["by_counter"].items())
    return [
        f"{count} votes arrived late in the last {late['lookback_s']} s of the streaming job "
        f"{late['streaming_job']} ({counters}; threshold {thresholds.max_late_votes:g}): all counted, but a vote "
        "later than the allowed lateness would be dropped: check the workers' clock synchronisation and the "
        "job's data freshness"
    ]
