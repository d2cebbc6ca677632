"""Configuration in one place: the table of every pipeline parameter (no Beam imported here,
so the CLI can build its help without loading Beam). pipeline/options.py turns it into one
options class per pipeline.

Each `Param` is one setting under two spellings: the CLI flag (kebab-case, `--window-seconds`)
and the Dataflow flex-template parameter (camelCase, `windowSeconds`). Both spellings are
accepted by the same argparse option. A value is checked and converted exactly once per launch,
by `parse_values`, into the pipeline's typed, immutable settings (`StreamingSettings.parse`,
`FoldSettings.parse`): `upvotes stream` does it from the values it collected, before Beam is
even imported; a flex-template launch and `upvotes fold` from the pipeline's options
(pipeline/options.py, in `launch`). The pipeline's `build` takes those settings as they are and
only wires. The defaults here are the only defaults: the transforms take every setting as an
argument.

The template metadata in templates/ and the parameter tables of docs/parameters.md and the
deploy guide (templates/README.md) are generated from these tables (`upvotes deploy metadata`),
and the tests keep the metadata, the parser and those tables in step. Standard options (--project, --region, --runner, --streaming) are
Beam's own and are not repeated here.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

PROJECT_ID = r"[a-z][-a-z0-9]{4,28}[a-z0-9]"
PUBSUB_NAME = r"[a-zA-Z][-a-zA-Z0-9_.~+%]{2,254}"
BOOLEAN = r"true|false"


def pubsub_path(project: str, kind: str, name: str) -> str:
    """A full Pub/Sub resource path; bare names are taken to be in `project`."""
    return name if name.startswith("projects/") else f"projects/{project}/{kind}/{name}"


def boolean(text: str) -> bool:
    """A BOOLEAN parameter's value ("true" or "false", as the template metadata's regex allows)."""
    return text == "true"


@dataclass(frozen=True)
class Param:
    flag: str  # CLI flag, kebab-case, without the leading dashes
    template_name: str  # flex-template parameter, camelCase
    label: str
    help: str
    regex: str  # the whole value must match
    default: str | None = None  # None: required
    example: str = ""
    kind: Callable[[str], str | int | float] = str  # what a valid value becomes: str, int, float or boolean

    @property
    def dest(self) -> str:
        return self.flag.replace("-", "_")

    def parse(self, text: object) -> str | int | float:
        """The value, checked against the regex and converted; InvalidParameter names both spellings."""
        if not re.fullmatch(self.regex, str(text)):
            raise InvalidParameter(
                f"--{self.flag}={text!r} is not valid (template parameter {self.template_name}): {self.help} "
                f"Example: --{self.flag}={self.example}"
            )
        return self.kind(str(text))

    @property
    def required(self) -> bool:
        return self.default is None


SPANNER_INSTANCE = Param(
    "instance",
    "spannerInstanceId",
    "Spanner instance ID",
    "The Cloud Spanner instance that holds the database.",
    r"[a-z][-a-z0-9]{0,62}[a-z0-9]",
    example="upvotes",
)
SPANNER_DATABASE = Param(
    "database",
    "spannerDatabaseId",
    "Spanner database ID",
    "The Cloud Spanner database with the Posts and PostDeltas tables (see schemas/posts.sql).",
    r"[a-z][a-z0-9_-]{0,28}[a-z0-9]",
    example="votes",
)

SPANNER_PARAMS = (SPANNER_INSTANCE, SPANNER_DATABASE)

WINDOW_SECONDS = Param(
    "window-seconds",
    "windowSeconds",
    "Window length in seconds",
    "Votes are summed per post over windows of this many seconds (ingestion time): a hot "
    "post costs about one Spanner row per window. Lower is fresher, higher writes less.",
    r"[1-9][0-9]{0,4}",
    default="10",
    example="10",
    kind=int,
)

MAX_CLOCK_SKEW_SECONDS = Param(
    "max-clock-skew-seconds",
    "maxClockSkewSeconds",
    "Largest clock skew believed, in seconds",
    "A vote whose event_time is further ahead of its publish time than this, or older than "
    "the 30-day delta retention, is counted in the hour it was ingested instead (never dropped).",
    r"[1-9][0-9]{0,5}",
    default="3600",
    example="3600",
    kind=int,
)

STREAMING_PARAMS: tuple[Param, ...] = (
    Param(
        "subscription",
        "inputSubscription",
        "Pub/Sub input subscription",
        "Subscription to read vote events from: projects/<project>/subscriptions/<name>, "
        "or a bare name in the pipeline's --project.",
        rf"(projects/{PROJECT_ID}/subscriptions/)?{PUBSUB_NAME}",
        example="projects/my-project/subscriptions/votes-sub",
    ),
    Param(
        "dead-letter-topic",
        "outputDeadletterTopic",
        "Dead-letter Pub/Sub topic",
        "Topic that receives every rejected message (original data and attributes, plus an "
        "'error' attribute) and every delta row that cannot be written: projects/<project>/topics/<name>, or a bare name.",
        rf"(projects/{PROJECT_ID}/topics/)?{PUBSUB_NAME}",
        example="projects/my-project/topics/votes-dead-letter",
    ),
    SPANNER_INSTANCE,
    SPANNER_DATABASE,
    WINDOW_SECONDS,
    Param(
        "rows-per-commit",
        "rowsPerCommit",
        "Delta rows per Spanner commit",
        "Most delta rows in one commit (the sink also stays under a mutation budget).",
        r"[1-9][0-9]{0,4}",
        default="1000",
        example="1000",
        kind=int,
    ),
    MAX_CLOCK_SKEW_SECONDS,
)

# What `upvotes dead-letters replay` shares with the stream: it parses each corrected vote under
# the stream's event-time policy (upvotes/operations/dead_letters.py), from the same flag and default.
REPLAY_PARAMS: tuple[Param, ...] = (MAX_CLOCK_SKEW_SECONDS,)

FOLD_PARAMS: tuple[Param, ...] = (
    SPANNER_INSTANCE,
    SPANNER_DATABASE,
    Param(
        "posts-per-commit",
        "postsPerCommit",
        "Posts per fold transaction",
        "Most posts folded in one read-write transaction (each post also writes its hourly rows).",
        r"[1-9][0-9]{0,4}",
        default="500",
        example="500",
        kind=int,
    ),
    Param(
        "max-delta-rows-per-run",
        "maxDeltaRowsPerRun",
        "Most delta rows one fold run takes",
        "A run following the change log takes the commits after the previous run's cursor, oldest "
        "first, until their delta rows reach this; the rest are left to the next run. It bounds a "
        "run's reads, all made at its snapshot, well within Spanner's 1-hour version retention "
        "(about 50 s at the emulator's 21,000 deltas/s; see the docs' fold section).",
        r"[1-9][0-9]{0,8}",
        default="1000000",
        example="1000000",
        kind=int,
    ),
    Param(
        "full-scan",
        "fullScan",
        "Scan every post",
        "true: read every post's watermark (a partitioned read of Posts) instead of following the "
        "DeltaCommits change log from the previous fold. A fold does this by itself when no fold has "
        "recorded where it read to (a new or migrated database); ask for it once after an older "
        "streaming job, which writes no change log, has stopped.",
        BOOLEAN,
        default="false",
        example="false",
        kind=boolean,
    ),
    Param(
        "data-boost",
        "dataBoost",
        "Spanner Data Boost for full scans",
        "true: run a full scan's partitioned read on Spanner Data Boost (compute billed apart from "
        "the instance, so it never competes with serving; needs spanner.databases.useDataBoost). "
        "Not available on the emulator.",
        BOOLEAN,
        default="false",
        example="false",
        kind=boolean,
    ),
)


# Recorded once per database by `upvotes provision` (spanner_store/ranking_settings.py); not a
# pipeline parameter: the fold reads the recorded value, so no job can disagree with the data.
HOT_HALF_LIFE_HOURS = Param(
    "hot-half-life-hours",
    "hotHalfLifeHours",
    "Hot score half-life in hours",
    "A vote counts half as much in the hot ranking every this many hours (schemas/hot_score.py), "
    "1 to 9999. Fixed per database when it is provisioned; a different value later is a recompute "
    "of every post's score (upvotes provision --recompute-hot).",
    r"(?:[1-9][0-9]{0,3})(?:\.[0-9]{1,3})?",
    default="12",
    example="12",
    kind=float,
)


class InvalidParameter(ValueError):
    """A parameter value the pipeline refuses before it starts."""


def parse_values(params: tuple[Param, ...], values: Mapping[str, object]) -> dict[str, Any]:
    """Each parameter's value (its default when missing), checked and converted, by `dest` (each
    value is of its parameter's kind, hence Any).

    The one place a parameter value is parsed; a missing required one or an invalid one
    raises InvalidParameter naming the flag, the template parameter and an example.
    """
    parsed = {}
    for param in params:
        value = values.get(param.dest)
        if value is None:
            value = param.default
        if value is None:
            raise InvalidParameter(
                f"--{param.flag} (template parameter {param.template_name}) is required: {param.help} "
                f"Example: --{param.flag}={param.example}"
            )
        parsed[param.dest] = param.parse(value)
    return parsed


@dataclass(frozen=True)
class StreamingSettings:
    """STREAMING_PARAMS, checked and converted (a test keeps the fields and the table in step)."""

    subscription: str
    dead_letter_topic: str
    instance: str
    database: str
    window_seconds: int
    rows_per_commit: int
    max_clock_skew_seconds: int

    @classmethod
    def parse(cls, values: Mapping[str, object]) -> StreamingSettings:
        """The settings from `values` (text or values by dest, as collected or as Beam's options
        hold them); raises InvalidParameter. Called once per launch."""
        return cls(**parse_values(STREAMING_PARAMS, values))


@dataclass(frozen=True)
class ReplaySettings:
    """REPLAY_PARAMS, checked and converted: the stream's settings a dead-letter replay applies."""

    max_clock_skew_seconds: int

    @classmethod
    def parse(cls, values: Mapping[str, object]) -> ReplaySettings:
        """The settings from `values` (by dest); raises InvalidParameter. Called once per replay."""
        return cls(**parse_values(REPLAY_PARAMS, values))


@dataclass(frozen=True)
class FoldSettings:
    """FOLD_PARAMS, checked and converted."""

    instance: str
    database: str
    posts_per_commit: int
    max_delta_rows_per_run: int
    full_scan: bool
    data_boost: bool

    @classmethod
    def parse(cls, values: Mapping[str, object]) -> FoldSettings:
        """The settings from `values` (by dest); raises InvalidParameter, also for Data Boost on
        the emulator. Called once per launch."""
        settings = cls(**parse_values(FOLD_PARAMS, values))
        if settings.data_boost and os.environ.get("SPANNER_EMULATOR_HOST"):
            raise InvalidParameter(
                "--data-boost=true (template parameter dataBoost) is for Cloud Spanner: the "
                "emulator (SPANNER_EMULATOR_HOST is set) has no Data Boost. Leave it off locally."
            )
        return settings


def defaults(params: tuple[Param, ...]) -> dict[str, Any]:
    """The parsed default of every optional parameter, by dest (for benchmarks and tools), each
    of its parameter's kind."""
    return {p.dest: p.parse(p.default) for p in params if p.default is not None}


def add_params(parser: argparse.ArgumentParser, params: tuple[Param, ...]) -> None:
    """The flags, both spellings each; values stay text until parse_values reads them."""
    for param in params:
        # A bare boolean flag (`--full-scan`) means true.
        bare: dict[str, Any] = {"nargs": "?", "const": "true"} if param.kind is boolean else {}
        parser.add_argument(
            f"--{param.flag}",
            f"--{param.template_name}",
            dest=param.dest,
            default=param.default,
            help=f"{param.help} (template parameter: {param.template_name})",
            **bare,
        )
