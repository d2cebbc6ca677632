"""How many votes arrived late: the lateness counters of the streaming job over a lookback.

The streaming pipeline counts every vote that arrives behind the watermark (issue 34) in two Beam
counters: WindowAndSumVotes/late_events (votes counted in a late pane, within the allowed
lateness, transforms/windowing.py) and ParseVotes/stamped_ahead_of_worker_clock (votes of
bundles whose worker clock lagged Pub/Sub's publish time by more than a second,
transforms/parse_and_sum.py). `upvotes status` reads them beside the alert-late-votes policy.

- On Google Cloud: Cloud Monitoring's METRIC for the streaming job (resource label `job_name`,
  metric label `metric_name`), over the last LOOKBACK_S. Dataflow exports a Beam counter as a
  gauge of its running total, one series per job; the count is each series' increase between
  its samples in that time (a sample lower than the one before is a counter that restarted
  from zero, as Prometheus' increase() takes it), summed by counter. A Beam counter exists
  only once incremented, so a healthy job has no series of these two at all: the job's own
  WITNESS metric (sampled every minute while it runs) tells "no late vote" from "nothing to
  read". Neither in the lookback is a check that could not be made (`LateVotesUnknown`,
  reported as such, never as healthy): is the streaming job running under that name?
- On the emulators there is no Cloud Monitoring, and nothing can be late: the local runner's
  watermark is its Pub/Sub reader's wall clock (local_runner/pubsub_reader.py) and a bundle is
  stamped no earlier than its messages' publish times, taken on the same clock. The report says
  so (NOT_APPLICABLE, a null count), and that is not a problem.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from datetime import datetime

from pipeline.params import PROJECT_ID
from upvotes.deploy.deploy_config import DeployConfig

METRIC = "dataflow.googleapis.com/job/user_counter"
WITNESS = "dataflow.googleapis.com/job/elapsed_time"
# (namespace, name) of each counter; Monitoring's metric_name label is the name alone.
COUNTERS = (("WindowAndSumVotes", "late_events"), ("ParseVotes", "stamped_ahead_of_worker_clock"))
LOOKBACK_S = 600
# `upvotes status --max-late-votes`: the late-votes alert's rate (ALERT_LATE_VOTES_PER_MIN) over the lookback.
DEFAULT_MAX_LATE_VOTES = DeployConfig.alert_late_votes_per_min * LOOKBACK_S // 60
# Dataflow's rule for a job name; it also keeps the Monitoring filter free of anything but a name.
JOB_NAME = r"[a-z]([-a-z0-9]{0,1022}[a-z0-9])?"
MONITORING = f"Cloud Monitoring {METRIC}, increase over the last {LOOKBACK_S} s"
NOT_APPLICABLE = (
    "not applicable on the emulators: there is no Cloud Monitoring, and the local runner's watermark "
    "is its Pub/Sub reader's wall clock while bundles are stamped no earlier than their publish "
    "times, so no vote can arrive late"
)


class LateVotesUnknown(RuntimeError):
    """The late votes could not be counted."""


@dataclass(frozen=True)
class LateVotes:
    streaming_job: str | None  # None on the emulators
    count: int | None  # None: not applicable (the emulators)
    by_counter: dict[str, int] | None  # "namespace/name" -> votes
    method: str  # MONITORING or NOT_APPLICABLE
    lookback_s: int | None
    as_of: datetime | None  # the newest sample read

    def as_dict(self) -> dict:
        return {
            "streaming_job": self.streaming_job,
            "count": self.count,
            "by_counter": self.by_counter,
            "method": self.method,
            "lookback_s": self.lookback_s,
            "as_of": None if self.as_of is None else self.as_of.isoformat(),
        }


def on_emulators() -> bool:
    return bool(os.environ.get("PUBSUB_EMULATOR_HOST") or os.environ.get("SPANNER_EMULATOR_HOST"))


def not_applicable() -> LateVotes:
    return LateVotes(None, None, None, NOT_APPLICABLE, None, None)


def read_late_votes(project: str, streaming_job: str) -> LateVotes:
    """The late votes of the streaming job, the way its environment allows."""
    if on_emulators():
        return not_applicable()
    from google.cloud import monitoring_v3

    return monitoring_late_votes(monitoring_v3.MetricServiceClient(), project, streaming_job)


def valid_job_name(name: str) -> bool:
    return re.fullmatch(JOB_NAME, name) is not None


def _value(point) -> float:
    typed = point.value
    return typed.double_value if type(typed).pb(typed).WhichOneof("value") == "double_value" else typed.int64_value


def increase(points) -> float:
    """A running total's increase between its samples (any order); a drop is a restart from zero."""
    values = [_value(p) for p in sorted(points, key=lambda p: p.interval.end_time)]
    return sum(after - before if after >= before else after for before, after in zip(values, values[1:]))


def monitoring_late_votes(client, project: str, streaming_job: str, now_s: float | None = None) -> LateVotes:
    """From `client` (a monitoring_v3.MetricServiceClient): the increase of both COUNTERS for the
    job over the last LOOKBACK_S seconds."""
    from google.cloud import monitoring_v3

    if re.fullmatch(PROJECT_ID, project) is None:
        raise LateVotesUnknown(f"not a project ID: {project!r}")
    if not valid_job_name(streaming_job):
        raise LateVotesUnknown(f"not a Dataflow job name: {streaming_job!r}")
    now_s = time.time() if now_s is None else now_s
    interval = monitoring_v3.TimeInterval(
        end_time={"seconds": int(now_s)}, start_time={"seconds": int(now_s - LOOKBACK_S)}
    )
    job = f'resource.type = "dataflow_job" AND resource.labels.job_name = "{streaming_job}"'

    def points_of(metric_filter: str) -> list:
        series = client.list_time_series(
            request={
                "name": f"projects/{project}",
                "filter": metric_filter,
                "interval": interval,
                "view": monitoring_v3.ListTimeSeriesRequest.TimeSeriesView.FULL,
            }
        )
        return [(one.metric.labels.get("metric_name", ""), list(one.points)) for one in series]

    names = ", ".join(f'"{name}"' for _, name in COUNTERS)
    counted = points_of(f'metric.type = "{METRIC}" AND {job} AND metric.labels.metric_name = one_of({names})')
    samples = [point for _, points in counted for point in points]
    if not samples:  # no counter incremented, or nothing exported: the job's own metric tells which
        samples = [point for _, points in points_of(f'metric.type = "{WITNESS}" AND {job}') for point in points]
    if not samples:
        raise LateVotesUnknown(
            f"no {METRIC} nor {WITNESS} sample of the Dataflow job {streaming_job} in the last "
            f"{LOOKBACK_S} s: is the streaming job running under that name (--streaming-job)?"
        )
    by_counter = {f"{namespace}/{name}": 0 for namespace, name in COUNTERS}
    for metric_name, points in counted:
        for namespace, name in COUNTERS:
            if metric_name == name:
                by_counter[f"{namespace}/{name}"] += round(increase(points))
    newest = max(point.interval.end_time for point in samples)
    return LateVotes(streaming_job, sum(by_counter.values()), by_counter, MONITORING, LOOKBACK_S, newest)
