"""Configuration in one place: the table of every pipeline parameter (no Beam imported here,
so the CLI can build its help without loading Beam). pipeline/options.py turns it into one
options class per pipeline.

Each `Param` is one setting under two spellings: the CLI flag (kebab-case, `--window-seconds`)
and the Dataflow flex-template parameter (camelCase, `windowSeconds`). Both spellings are
accepted by the same argparse option; the template metadata in templates/ and the parameter
tables of both READMEs are generated from these tables (`upvotes deploy metadata`), and the
tests keep the metadata, the parser and the READMEs in step. Standard options (--project,
--region, --runner, --streaming) are Beam's own and are not repeated here.
"""
from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

PROJECT_ID = r"[a-z][-a-z0-9]{4,28}[a-z0-9]"
PUBSUB_NAME = r"[a-zA-Z][-a-zA-Z0-9_.~+%]{2,254}"


@dataclass(frozen=True)
class Param:
    flag: str  # CLI flag, kebab-case, without the leading dashes
    template_name: str  # flex-template parameter, camelCase
    label: str
    help: str
    regex: str  # the whole value must match
    default: str | None = None  # None: required
    example: str = ""

    @property
    def dest(self) -> str:
        return self.flag.replace("-", "_")

    @property
    def required(self) -> bool:
        return self.default is None


SPANNER_INSTANCE = Param(
    "instance", "spannerInstanceId", "Spanner instance ID",
    "The Cloud Spanner instance that holds the database.",
    r"[a-z][-a-z0-9]{0,62}[a-z0-9]", example="upvotes",
)
SPANNER_DATABASE = Param(
    "database", "spannerDatabaseId", "Spanner database ID",
    "The Cloud Spanner database with the Posts and PostDeltas tables (see schemas/posts.sql).",
    r"[a-z][a-z0-9_-]{0,28}[a-z0-9]", example="votes",
)

SPANNER_PARAMS = (SPANNER_INSTANCE, SPANNER_DATABASE)

STREAMING_PARAMS: tuple[Param, ...] = (
    Param(
        "subscription", "inputSubscription", "Pub/Sub input subscription",
        "Subscription to read vote events from: projects/<project>/subscriptions/<name>, "
        "or a bare name in the pipeline's --project.",
        rf"(projects/{PROJECT_ID}/subscriptions/)?{PUBSUB_NAME}", example="projects/my-project/subscriptions/votes-sub",
    ),
    Param(
        "dead-letter-topic", "outputDeadletterTopic", "Dead-letter Pub/Sub topic",
        "Topic that receives every rejected message (original data and attributes, plus an "
        "'error' attribute) and every delta row that cannot be written: projects/<project>/topics/<name>, or a bare name.",
        rf"(projects/{PROJECT_ID}/topics/)?{PUBSUB_NAME}", example="projects/my-project/topics/votes-dead-letter",
    ),
    SPANNER_INSTANCE,
    SPANNER_DATABASE,
    Param(
        "window-seconds", "windowSeconds", "Window length in seconds",
        "Votes are summed per post over windows of this many seconds (ingestion time): a hot "
        "post costs about one Spanner row per window. Lower is fresher, higher writes less.",
        r"[1-9][0-9]{0,4}", default="10", example="10",
    ),
    Param(
        "rows-per-commit", "rowsPerCommit", "Delta rows per Spanner commit",
        "Most delta rows in one commit (the sink also stays under a mutation budget).",
        r"[1-9][0-9]{0,4}", default="1000", example="1000",
    ),
)

FOLD_PARAMS: tuple[Param, ...] = (
    SPANNER_INSTANCE,
    SPANNER_DATABASE,
    Param(
        "posts-per-commit", "postsPerCommit", "Posts per fold transaction",
        "Most posts folded in one read-write transaction (each post also writes its hourly rows).",
        r"[1-9][0-9]{0,4}", default="500", example="500",
    ),
)


class InvalidParameter(ValueError):
    """A parameter value the pipeline refuses before it starts."""


def validate(params: tuple[Param, ...], values: dict[str, object]) -> None:
    """Checks each value against its regex; the message names the flag, the template name and an example."""
    for param in params:
        value = values.get(param.dest)
        if value is None:
            raise InvalidParameter(
                f"--{param.flag} (template parameter {param.template_name}) is required: {param.help} "
                f"Example: --{param.flag}={param.example}"
            )
        if not re.fullmatch(param.regex, str(value)):
            raise InvalidParameter(
                f"--{param.flag}={value!r} is not valid (template parameter {param.template_name}): {param.help} "
                f"Example: --{param.flag}={param.example}"
            )


def add_params(parser: argparse.ArgumentParser, params: tuple[Param, ...]) -> None:
    for param in params:
        parser.add_argument(
            f"--{param.flag}", f"--{param.template_name}", dest=param.dest,
            default=param.default, help=f"{param.help} (template parameter: {param.template_name})",
        )


