"""`upvotes publish`: a generated viral workload or a JSON-lines file, to Pub/Sub, with a ledger."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from pipeline.params import PUBSUB_NAME
from schemas.contract import MAX_BATCH_EVENTS
from schemas.counters import Counter
from upvotes.command_errors import UsageError
from upvotes.devtools.workload import DEFAULT_BATCH_SIZE, OTHER_COUNTERS
from upvotes.flags.database import add_project_argument

HELP = (
    "Publish vote events (a generated viral workload or a JSON-lines file) to Pub/Sub, "
    "with a ledger of the exact expected totals."
)
TOPIC_CHECK_TIMEOUT_S = 10.0
_TOPIC_ID = PUBSUB_NAME  # Pub/Sub's resource name rules, as the pipeline parameters check them
_TOPIC_PATH = re.compile(rf"projects/[^/]+/topics/{_TOPIC_ID}")


def resolve_topic(project: str, topic: str) -> str:
    """A bare topic name or a full projects/P/topics/T path, as a full path."""
    if _TOPIC_PATH.fullmatch(topic):
        return topic
    if re.fullmatch(_TOPIC_ID, topic) and not topic.startswith("goog"):
        return f"projects/{project}/topics/{topic}"
    raise UsageError(
        f"{topic!r} is not a topic name (3-255 letters, digits and -_.~+%, starting with a letter, "
        "not with 'goog') nor a projects/PROJECT/topics/TOPIC path"
    )


def _check_topic(topic_path: str) -> None:
    """Fails fast on a missing topic or an unreachable Pub/Sub, which publishing would report only
    as one failure per message."""
    from google.api_core import exceptions
    from google.api_core.retry import Retry
    from google.auth.exceptions import GoogleAuthError
    from google.cloud import pubsub_v1

    emulator = os.environ.get("PUBSUB_EMULATOR_HOST")
    where = f"the Pub/Sub emulator at {emulator}" if emulator else "Pub/Sub"
    try:
        # The default retry keeps retrying an unreachable host for 600 s, whatever `timeout` says.
        retry = Retry(timeout=TOPIC_CHECK_TIMEOUT_S)
        pubsub_v1.PublisherClient().get_topic(topic=topic_path, retry=retry, timeout=TOPIC_CHECK_TIMEOUT_S)
    except exceptions.NotFound:
        raise UsageError(f"topic {topic_path} does not exist in {where}; create it with `upvotes provision`") from None
    except exceptions.PermissionDenied:
        pass  # a publish-only role may not read topic metadata; publishing itself will tell
    except GoogleAuthError as error:
        raise UsageError(
            f"no usable Google Cloud credentials ({error}); run: gcloud auth application-default "
            'login, or use the emulators: eval "$(upvotes emulators start)"'
        ) from None
    except (exceptions.GoogleAPICallError, exceptions.RetryError) as error:
        hint = '; is it running? eval "$(upvotes emulators start)"' if emulator else ""
        raise UsageError(f"cannot reach {where}: {error}{hint}") from None


def _fraction_dest(counter: Counter) -> str:
    return f"{counter.noun}_fraction"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_project_argument(parser)
    parser.add_argument("--topic", required=True, help="topic to publish to: a bare name or projects/P/topics/T")
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--file",
        metavar="FILE",
        help="publish the lines of this JSON-lines file as they are, one message per line, instead of "
        "generated events; lines the pipeline would reject are published too and counted as invalid",
    )
    source.add_argument(
        "--events",
        type=int,
        default=10_000,
        metavar="N",
        help="number of valid events to generate (default: %(default)s)",
    )
    generated = parser.add_argument_group("generated workload (without --file)")
    generated.add_argument(
        "--posts",
        type=int,
        default=1000,
        metavar="M",
        help="number of posts p-1..p-M the votes go to (default: %(default)s)",
    )
    generated.add_argument(
        "--zipf",
        type=float,
        default=1.2,
        metavar="S",
        help="Zipf exponent of post popularity: higher is more skewed, 0 is even (default: %(default)s)",
    )
    generated.add_argument(
        "--seed",
        type=int,
        default=0,
        metavar="X",
        help="random seed; the same seed gives the same events (default: %(default)s)",
    )
    generated.add_argument(
        "--voters",
        type=int,
        default=1_000_000,
        metavar="U",
        help="user IDs are drawn from this many users (default 1000000)",
    )
    generated.add_argument(
        "--invalid",
        type=int,
        default=0,
        metavar="K",
        help="invalid messages to mix in for the dead-letter path (default: %(default)s)",
    )
    generated.add_argument(
        "--unvote-fraction",
        type=float,
        default=0.1,
        metavar="F",
        help="fraction of events that are un-votes, -1 upvote (default: %(default)s)",
    )
    for counter in OTHER_COUNTERS:
        generated.add_argument(
            f"--{counter.noun}-fraction",
            type=float,
            default=counter.generated_fraction,
            metavar="F",
            dest=_fraction_dest(counter),
            help=f"fraction of events that are {counter.name}, +1 {counter.noun} (default: %(default)s)",
        )
    states = parser.add_argument_group(
        "vote-state workload (--vote-states: one vote per user, up/down/none, instead of delta events)"
    )
    states.add_argument(
        "--vote-states",
        action="store_true",
        help="generate vote-state events: each user's latest vote per post counts once; --posts 1 is one viral post",
    )
    for name, default, what in (
        ("down", 0.2, "first votes that are down rather than up"),
        ("flip", 0.2, "events that change a recent voter's vote, up -> down -> none -> up"),
        ("duplicate", 0.1, "events that repeat an earlier event exactly (a retry, a republication)"),
        ("late", 0.1, "events that arrive after newer events of the same kind (out of order)"),
    ):
        states.add_argument(
            f"--{name}-fraction",
            type=float,
            default=default,
            metavar="F",
            help=f"fraction of {what} (default: %(default)s)",
        )
    generated.add_argument(
        "--batch-size",
        type=int,
        metavar="N",
        help="events per message (contract v2, ndjson), 1 to 1000; 1 sends one event per message "
        f"(default: {DEFAULT_BATCH_SIZE})",
    )
    parser.add_argument(
        "--rate",
        type=float,
        metavar="R",
        help="publish at most R events per second, evenly paced (default: as fast as possible)",
    )
    parser.add_argument(
        "--ledger",
        metavar="FILE",
        help="write the exact expected totals (per post, and per post and event hour) "
        "to this JSON file, for `upvotes verify`",
    )
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="don't report progress on stderr")


def run(args: argparse.Namespace) -> int:
    from upvotes.devtools.publishing import publish_file, publish_workload
    from upvotes.devtools.workload import VoteStateWorkload, Workload

    topic_path = resolve_topic(args.project, args.topic)
    if args.rate is not None and args.rate <= 0:
        raise UsageError("--rate must be positive")
    if args.file and not os.path.isfile(args.file):
        raise UsageError(f"no such file: {args.file}")
    if args.ledger and not Path(args.ledger).resolve().parent.is_dir():
        raise UsageError(f"the directory of the ledger {args.ledger} does not exist")
    if args.file and args.batch_size not in (None, 1):
        raise UsageError("--batch-size packs generated events; --file publishes each line as its own message")
    batch_size = DEFAULT_BATCH_SIZE if args.batch_size is None else args.batch_size
    if not 1 <= batch_size <= MAX_BATCH_EVENTS:
        raise UsageError(f"--batch-size must be between 1 and {MAX_BATCH_EVENTS}")
    if args.file and args.vote_states:
        raise UsageError("--vote-states generates events; --file publishes the file's own events")
    workload: Workload | VoteStateWorkload | None
    try:
        if args.file:
            workload = None
        elif args.vote_states:
            workload = VoteStateWorkload(
                events=args.events,
                posts=args.posts,
                zipf=args.zipf,
                seed=args.seed,
                invalid=args.invalid,
                voters=args.voters,
                down_fraction=args.down_fraction,
                flip_fraction=args.flip_fraction,
                duplicate_fraction=args.duplicate_fraction,
                late_fraction=args.late_fraction,
            )
        else:
            workload = Workload(
                events=args.events,
                posts=args.posts,
                zipf=args.zipf,
                seed=args.seed,
                invalid=args.invalid,
                voters=args.voters,
                unvote_fraction=args.unvote_fraction,
                fractions={counter.name: getattr(args, _fraction_dest(counter)) for counter in OTHER_COUNTERS},
            )
    except ValueError as error:
        raise UsageError(str(error)) from None
    _check_topic(topic_path)
    try:
        if workload is None:
            report, _ = publish_file(topic_path, args.file, args.ledger, args.rate, args.progress)
        else:
            report, _ = publish_workload(topic_path, workload, args.ledger, args.rate, args.progress, batch_size)
    except OSError as error:
        raise UsageError(str(error)) from None
    summary = (
        f"published {report.published:,} events ({report.invalid:,} invalid) in {report.seconds:.1f} s: "
        f"{report.events_per_s:,.0f} events/s"
    )
    if report.failed:
        summary += f"; {report.failed:,} FAILED"
    if args.ledger:
        summary += f"; ledger: {args.ledger}"
    print(summary)
    return 1 if report.failed else 0
