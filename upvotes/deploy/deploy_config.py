"""Where and how to deploy: the two templates and their parameters, and DeployConfig, every
setting of `upvotes deploy` with its environment variable (`upvotes deploy --help` lists them).

The template parameters come from the one table in pipeline/params.py; DeployConfig holds the
value each launch passes for them, and `validate` checks those values with the same regexes the
template metadata carries.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.params import FOLD_PARAMS, PROJECT_ID, STREAMING_PARAMS, InvalidParameter, Param

REPO_ROOT = Path(__file__).resolve().parents[2]
KINDS = ("streaming", "fold")
PARAMS: dict[str, tuple[Param, ...]] = {"streaming": STREAMING_PARAMS, "fold": FOLD_PARAMS}


def all_params() -> list[Param]:
    """Every Param of both pipelines, once each, in table order."""
    seen: dict[str, Param] = {}
    for kind in KINDS:
        for param in PARAMS[kind]:
            seen.setdefault(param.flag, param)
    return list(seen.values())


def _param(flag: str) -> Param:
    return next(p for p in all_params() if p.flag == flag)


def _setting(env: str, text: str, param: str | None = None) -> dict[str, str]:
    return {"env": env, "help": text, **({"param": param} if param else {})}


@dataclass(frozen=True)
class DeployConfig:
    """Where and how to deploy. Every field has an environment variable (`from_env`).

    Service accounts are account IDs in `project` (`upvotes-streaming`) or full emails.
    Template parameters that are optional in the pipeline may be None: the launch then
    leaves them out and the pipeline's default applies.
    """

    project: str = field(default="", metadata=_setting("PROJECT", "Google Cloud project ID (required)"))
    region: str = field(
        default="us-central1",
        metadata=_setting("REGION", "region of the Dataflow jobs, bucket, image repository and scheduler job"),
    )
    bucket: str = field(
        default="",
        metadata=_setting("BUCKET", "bucket for template specs, staging and temp files (default: <PROJECT>-upvotes)"),
    )
    repository: str = field(default="upvotes", metadata=_setting("REPOSITORY", "Artifact Registry Docker repository"))
    image_tag: str = field(
        default="latest",
        metadata=_setting("IMAGE_TAG", "tag of the images; use an immutable one, such as the git commit"),
    )
    instance: str = field(default="upvotes", metadata=_setting("INSTANCE", "Spanner instance ID", "instance"))
    instance_config: str = field(
        default="", metadata=_setting("INSTANCE_CONFIG", "Spanner instance configuration (default: regional-<REGION>)")
    )
    database: str = field(default="votes", metadata=_setting("DATABASE", "Spanner database ID", "database"))
    topic: str = field(default="votes", metadata=_setting("TOPIC", "topic the publishers send votes to"))
    subscription: str = field(
        default="votes-sub", metadata=_setting("SUBSCRIPTION", "subscription the streaming job reads", "subscription")
    )
    dead_letter_topic: str = field(
        default="votes-dead-letter",
        metadata=_setting(
            "DEAD_LETTER_TOPIC", "dead-letter topic; its subscription is <DEAD_LETTER_TOPIC>-kept", "dead-letter-topic"
        ),
    )
    window_seconds: str | None = field(
        default=_param("window-seconds").default,
        metadata=_setting(
            "WINDOW_SECONDS", "seconds per window: lower is fresher, higher writes fewer rows", "window-seconds"
        ),
    )
    rows_per_commit: str | None = field(
        default=_param("rows-per-commit").default,
        metadata=_setting("ROWS_PER_COMMIT", "delta rows per Spanner commit", "rows-per-commit"),
    )
    max_clock_skew_seconds: str | None = field(
        default=_param("max-clock-skew-seconds").default,
        metadata=_setting(
            "MAX_CLOCK_SKEW_SECONDS",
            "event times further ahead than this count in their ingestion hour",
            "max-clock-skew-seconds",
        ),
    )
    posts_per_commit: str | None = field(
        default=_param("posts-per-commit").default,
        metadata=_setting("POSTS_PER_COMMIT", "posts per fold transaction", "posts-per-commit"),
    )
    max_delta_rows_per_run: str | None = field(
        default=_param("max-delta-rows-per-run").default,
        metadata=_setting(
            "MAX_DELTA_ROWS_PER_RUN",
            "delta rows one fold run takes at most; the rest wait for the next run",
            "max-delta-rows-per-run",
        ),
    )
    full_scan: str | None = field(
        default=_param("full-scan").default,
        metadata=_setting(
            "FULL_SCAN",
            "true: the fold reads every post instead of the change log (for a one-off `run` after a "
            "migration; leave it false for the schedule)",
            "full-scan",
        ),
    )
    data_boost: str | None = field(
        default=_param("data-boost").default,
        metadata=_setting(
            "DATA_BOOST",
            "true: the fold's full scans run on Spanner Data Boost (its account gets the Data Boost reader role)",
            "data-boost",
        ),
    )
    streaming_job: str = field(default="upvotes-streaming", metadata=_setting("STREAMING_JOB", "streaming job name"))
    fold_job: str = field(
        default="upvotes-fold",
        metadata=_setting(
            "FOLD_JOB", "fold job name and scheduler job ID; a launch is refused while a fold of this name runs"
        ),
    )
    fold_schedule: str = field(
        default="*/10 * * * *",
        metadata=_setting("FOLD_SCHEDULE", "cron schedule of the fold (unix-cron, in TIME_ZONE)"),
    )
    time_zone: str = field(default="Etc/UTC", metadata=_setting("TIME_ZONE", "time zone of FOLD_SCHEDULE"))
    max_workers: int = field(default=3, metadata=_setting("MAX_WORKERS", "most workers of the streaming job"))
    fold_max_workers: int = field(default=2, metadata=_setting("FOLD_MAX_WORKERS", "most workers of one fold"))
    machine_type: str = field(
        default="", metadata=_setting("MACHINE_TYPE", "worker machine type of both jobs (default: Dataflow's)")
    )
    streaming_engine: bool = field(
        default=True,
        metadata=_setting("STREAMING_ENGINE", "1: run the streaming job on Streaming Engine; 0: leave the flag off"),
    )
    experiments: str = field(
        default="", metadata=_setting("EXPERIMENTS", "comma-separated Dataflow experiments for both jobs")
    )
    update: bool = field(
        default=False,
        metadata=_setting(
            "UPDATE", "1: `run` updates the running streaming job in place, `schedule` updates the scheduler job"
        ),
    )
    worker_sa: str = field(
        default="upvotes-streaming",
        metadata=_setting("WORKER_SA", "service account of the streaming job's launcher and workers"),
    )
    fold_sa: str = field(
        default="upvotes-fold",
        metadata=_setting("FOLD_WORKER_SA", "service account of the fold's launcher and workers"),
    )
    publisher_sa: str = field(
        default="upvotes-publisher", metadata=_setting("PUBLISHER_SA", "service account of the vote publishers")
    )
    scheduler_sa: str = field(
        default="upvotes-scheduler",
        metadata=_setting(
            "SCHEDULER_SA", "service account whose OAuth token Cloud Scheduler sends to the Dataflow API"
        ),
    )
    # Thresholds of the alert policies (`upvotes deploy alerts`) and of `upvotes status`.
    alert_fold_lag_s: int = field(
        default=1800,
        metadata=_setting(
            "ALERT_FOLD_LAG_S", "seconds without a finished fold before the fold-lag alert (3 fold intervals)"
        ),
    )
    alert_dead_letters: int = field(
        default=1,
        metadata=_setting("ALERT_DEAD_LETTERS", "undelivered dead letters at which the dead-letter alert fires"),
    )
    alert_data_freshness_s: int = field(
        default=300,
        metadata=_setting("ALERT_DATA_FRESHNESS_S", "streaming job data freshness (s) above which its alert fires"),
    )
    alert_system_lag_s: int = field(
        default=300, metadata=_setting("ALERT_SYSTEM_LAG_S", "streaming job system lag (s) above which its alert fires")
    )
    alert_sink_retries_per_min: int = field(
        default=600,
        metadata=_setting(
            "ALERT_SINK_RETRIES_PER_MIN", "sink transient retries per minute above which its alert fires"
        ),
    )
    alert_unfolded_age_s: int = field(
        default=7 * 86_400,
        metadata=_setting(
            "ALERT_UNFOLDED_AGE_S",
            "age (s) of the oldest delta a fold left unfolded above which its alert fires "
            "(7 days: long before the 30-day row deletion policy deletes it uncounted)",
        ),
    )
    alert_late_votes_per_min: int = field(
        default=0,
        metadata=_setting(
            "ALERT_LATE_VOTES_PER_MIN",
            "votes a minute that arrived behind the watermark, or from a worker clock behind "
            "Pub/Sub's, above which the late-votes alert fires",
        ),
    )
    alert_duration_s: int = field(
        default=300,
        metadata=_setting("ALERT_DURATION_S", "seconds a rate or lag condition must hold before its alert fires"),
    )
    notification_channels: str = field(
        default="",
        metadata=_setting(
            "NOTIFICATION_CHANNELS", "comma-separated Cloud Monitoring notification channel IDs for the alerts"
        ),
    )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> DeployConfig:
        """Reads every field from its environment variable; unset variables keep the defaults.
        An optional template parameter set to the empty string is left out of launches."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}  # each of its field's type
        for f in dataclasses.fields(cls):
            raw = environ.get(f.metadata["env"])
            if raw is None:
                continue
            if isinstance(f.default, bool):
                values[f.name] = _truthy(f.metadata["env"], raw)
            elif isinstance(f.default, int):
                values[f.name] = _positive_int(f.metadata["env"], raw)
            elif "param" in f.metadata:
                values[f.name] = raw.strip() or None
            else:
                values[f.name] = raw.strip()
        return cls(**values)

    # Derived names.
    @property
    def bucket_name(self) -> str:
        return self.bucket or f"{self.project}-upvotes"

    @property
    def spanner_instance_config(self) -> str:
        return self.instance_config or f"regional-{self.region}"

    @property
    def dead_letter_subscription(self) -> str:
        return f"{self.dead_letter_topic}-kept"  # as upvotes.resources.Resources names it

    def email(self, account: str) -> str:
        return account if "@" in account else f"{account}@{self.project}.iam.gserviceaccount.com"

    def image(self, kind: str) -> str:
        """The image of one template: launcher and SDK worker at once (templates/Dockerfile)."""
        return f"{self.region}-docker.pkg.dev/{self.project}/{self.repository}/upvotes-{kind}:{self.image_tag}"

    def template_path(self, kind: str) -> str:
        return f"gs://{self.bucket_name}/templates/{kind}.json"

    @property
    def temp_location(self) -> str:
        return f"gs://{self.bucket_name}/tmp"

    @property
    def staging_location(self) -> str:
        return f"gs://{self.bucket_name}/staging"

    def job_sa(self, kind: str) -> str:
        return self.email(self.worker_sa if kind == "streaming" else self.fold_sa)

    def param_values(self) -> dict[str, str | None]:
        """Template parameter values by Param.flag; Pub/Sub names as full resource paths."""
        return {
            "subscription": f"projects/{self.project}/subscriptions/{self.subscription}",
            "dead-letter-topic": f"projects/{self.project}/topics/{self.dead_letter_topic}",
            "instance": self.instance,
            "database": self.database,
            "window-seconds": self.window_seconds,
            "rows-per-commit": self.rows_per_commit,
            "max-clock-skew-seconds": self.max_clock_skew_seconds,
            "posts-per-commit": self.posts_per_commit,
            "max-delta-rows-per-run": self.max_delta_rows_per_run,
            "data-boost": self.data_boost,
            "full-scan": self.full_scan,
        }

    def validate(self) -> DeployConfig:
        """Refuses settings the commands would fail on, naming the variable to fix."""
        env = {f.name: f.metadata["env"] for f in dataclasses.fields(self)}
        if not self.project:
            raise InvalidParameter("PROJECT is required: export PROJECT=<your Google Cloud project ID>")
        if not re.fullmatch(PROJECT_ID, self.project):
            raise InvalidParameter(f"PROJECT={self.project!r} is not a Google Cloud project ID")
        if not re.fullmatch(r"[a-z]+-[a-z]+[0-9]+", self.region):
            raise InvalidParameter(f"REGION={self.region!r} is not a region such as us-central1")
        if not re.fullmatch(r"[a-z0-9][-a-z0-9_.]{1,61}[a-z0-9]", self.bucket_name):
            raise InvalidParameter(f"BUCKET={self.bucket_name!r} is not a Cloud Storage bucket name")
        if len(self.fold_schedule.split()) != 5:
            raise InvalidParameter(f"FOLD_SCHEDULE={self.fold_schedule!r} is not a five-field cron schedule")
        for name in ("repository", "image_tag", "streaming_job", "fold_job", "topic"):
            if not re.fullmatch(r"[a-z0-9][-a-z0-9_.]*", getattr(self, name)):
                raise InvalidParameter(
                    f"{env[name]}={getattr(self, name)!r} must be lowercase letters, digits, -, _ or ."
                )
        values = self.param_values()
        by_flag = {f.metadata["param"]: f.metadata["env"] for f in dataclasses.fields(self) if "param" in f.metadata}
        for param in all_params():
            value = values[param.flag]
            if value is None and param.required:
                raise InvalidParameter(f"{by_flag[param.flag]} is required (template parameter {param.template_name})")
            if value is not None and not re.fullmatch(param.regex, value):
                raise InvalidParameter(
                    f"{by_flag[param.flag]}={value!r} is not valid for template parameter "
                    f"{param.template_name}: {param.help} Example: {param.example}"
                )
        return self


def _truthy(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("", "0", "false", "no", "off"):
        return False
    raise InvalidParameter(f"{name}={raw!r}: expected 1 or 0")


def _positive_int(name: str, raw: str) -> int:
    if not re.fullmatch(r"[1-9][0-9]*", raw.strip()):
        raise InvalidParameter(f"{name}={raw!r}: expected a positive whole number")
    return int(raw)


def environment_help() -> str:
    """The environment variables of DeployConfig, for `upvotes deploy --help`."""
    lines = ["environment variables (defaults in brackets):"]
    for f in dataclasses.fields(DeployConfig):
        default = f.default if f.default not in ("", None) else "-"
        if isinstance(f.default, bool):
            default = int(f.default)
        lines.append(f"  {f.metadata['env']:<18} {f.metadata['help']} [{default}]")
    return "\n".join(lines)
