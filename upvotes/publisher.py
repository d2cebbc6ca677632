"""Publish vote events to Pub/Sub and record the exact totals they must add up to.

`upvotes publish` sends either a generated viral workload (`Workload`: post ranks drawn
from a Zipf distribution, so a few posts take most of the votes, plus deliberately
invalid messages for the dead-letter path) or the lines of a JSON-lines file. Alongside,
it keeps a `Ledger` of the totals per post and per post and event hour that a correct
pipeline must end up with, exactly, and can save it as JSON for later checks.

Publishing goes through the client's batching (1,000 messages or 50 ms per batch, the
fastest setting measured against the emulator), keeps at most MAX_PENDING publish
futures alive so memory stays flat for any number of events, optionally paces to a
rate, and counts failed publishes instead of raising.
"""
from __future__ import annotations

import argparse
import bisect
import itertools
import json
import logging
import os
import random
import re
import sys
import time
import uuid
from collections import deque
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, TypeVar

import orjson
from google.api_core import exceptions
from google.api_core.retry import Retry
from google.auth.exceptions import GoogleAuthError
from google.cloud import pubsub_v1
from google.cloud.pubsub_v1.publisher.futures import Future

from transforms.records import COUNTERS, HOUR_S, SHARES, UPVOTES, VoteEvent
from upvotes.progress import Progress

DESCRIPTION = (
    "Publish vote events (a generated viral workload or a JSON-lines file) to Pub/Sub, "
    "with a ledger of the exact expected totals."
)

LOG = logging.getLogger(__name__)
BATCH_SETTINGS = pubsub_v1.types.BatchSettings(max_messages=1000, max_latency=0.05)
MAX_PENDING = 5000  # publish futures kept alive: five full batches in flight
SPAN_MS = 2 * 3600 * 1000  # generated event times cover the two hours before the start time
TOPIC_CHECK_TIMEOUT_S = 10.0
_TOPIC_ID = r"[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}"  # Pub/Sub's resource name rules
_TOPIC_PATH = re.compile(rf"projects/[^/]+/topics/{_TOPIC_ID}")
_COUNTER_INDEX = {counter: index for index, counter in enumerate(COUNTERS)}
T = TypeVar("T")


@dataclass(frozen=True)
class Workload:
    """A viral workload, deterministic for a given seed and start_time.

    Each event goes to post `p-<rank>`, the rank drawn from Zipf(zipf) over `posts` posts
    (p-1 is the hottest). It is a share (+1 shares) with probability share_fraction, an
    un-vote (-1 upvotes) with probability unvote_fraction, otherwise an upvote (+1).
    Event times rise through the two hours before start_time (default: now; a naive
    datetime is taken as UTC), so at least two event hours appear.
    """

    events: int
    posts: int
    zipf: float = 1.2
    seed: int = 0
    unvote_fraction: float = 0.1
    share_fraction: float = 0.2
    invalid: int = 0
    start_time: datetime | None = None

    def __post_init__(self) -> None:
        if self.events < 0 or self.invalid < 0:
            raise ValueError("the numbers of events and invalid messages must not be negative")
        if self.posts < 1:
            raise ValueError("posts must be at least 1")
        if self.zipf < 0:
            raise ValueError("the Zipf exponent must not be negative (0 spreads votes evenly)")
        fractions = (self.unvote_fraction, self.share_fraction)
        if min(fractions) < 0 or sum(fractions) > 1:
            raise ValueError("unvote and share fractions must be at least 0 and add up to at most 1")


def generate_events(workload: Workload) -> Iterator[dict[str, Any]]:
    """The workload's valid events, as dicts following schemas/vote_event.schema.json."""
    rng = random.Random(workload.seed)
    cumulative = list(itertools.accumulate(rank ** -workload.zipf for rank in range(1, workload.posts + 1)))
    weight = cumulative[-1]
    start = workload.start_time or datetime.now(timezone.utc)
    start_ms = int((start if start.tzinfo else start.replace(tzinfo=timezone.utc)).timestamp() * 1000)
    unvote_below = workload.share_fraction + workload.unvote_fraction
    for index in range(workload.events):
        # min(): a draw rounding up to exactly `weight` would index one past the last post.
        rank = min(bisect.bisect_right(cumulative, rng.random() * weight), workload.posts - 1) + 1
        kind = rng.random()
        counter, delta = (SHARES, 1) if kind < workload.share_fraction else (UPVOTES, -1 if kind < unvote_below else 1)
        # Rising times with jitter, like a live stream, ending just before start_time.
        event_ms = start_ms - int(SPAN_MS * (workload.events - index - rng.random()) / workload.events)
        yield {
            "post_id": f"p-{rank}",
            "counter": counter,
            "delta": delta,
            "event_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "event_time": _rfc3339_ms(event_ms),
            "user_id": f"u-{rng.randrange(1_000_000)}",
        }


def _rfc3339_ms(epoch_ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_ms // 1000)) + f".{epoch_ms % 1000:03d}Z"


def _hour_text(hour_s: int) -> str:
    return time.strftime("%Y-%m-%dT%H:00:00Z", time.gmtime(hour_s))


def _hour_seconds(hour_text: str) -> int:
    return int(datetime.fromisoformat(hour_text).timestamp())


# Each kind of invalid message, with the parse_vote reason it must be rejected for.
INVALID_KINDS: tuple[tuple[str, Callable[[dict[str, Any]], bytes]], ...] = (
    ("not_json", lambda vote: orjson.dumps(vote)[:-1]),  # the closing brace cut off
    ("not_utf8", lambda vote: b"\xff" + orjson.dumps(vote)),
    ("not_object", lambda vote: orjson.dumps(list(vote.values()))),
    ("missing_field", lambda vote: orjson.dumps({k: v for k, v in vote.items() if k != "post_id"})),
    ("wrong_type", lambda vote: orjson.dumps({**vote, "delta": "1"})),
    ("zero_delta", lambda vote: orjson.dumps({**vote, "delta": 0})),
    ("delta_out_of_range", lambda vote: orjson.dumps({**vote, "delta": 1_000_001})),
    ("unknown_counter", lambda vote: orjson.dumps({**vote, "counter": "likes"})),
    ("empty_post_id", lambda vote: orjson.dumps({**vote, "post_id": ""})),
    ("post_id_too_long", lambda vote: orjson.dumps({**vote, "post_id": "p" * 129})),
    ("wrong_type", lambda vote: orjson.dumps({**vote, "delta": 1.0})),
    ("bad_event_time", lambda vote: orjson.dumps({**vote, "event_time": "yesterday"})),
)


def invalid_payloads(count: int, seed: int = 0) -> list[bytes]:
    """`count` messages that parse_vote rejects, cycling through INVALID_KINDS.

    Each is a valid vote with exactly one defect, so it is rejected for that defect alone.
    """
    rng = random.Random(seed)
    payloads = []
    for index in range(count):
        vote = {
            "post_id": f"p-{rng.randint(1, 100)}",
            "counter": UPVOTES,
            "delta": 1,
            "event_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "event_time": "2026-11-22T01:02:03.456Z",
        }
        payloads.append(INVALID_KINDS[index % len(INVALID_KINDS)][1](vote))
    return payloads


class Ledger:
    """The exact totals that a correct pipeline reaches for the valid events published."""

    def __init__(self) -> None:
        self.events = 0
        self.invalid = 0
        self._posts: dict[str, list[int]] = {}  # post -> [upvotes, shares]
        self._hourly: dict[str, dict[int, list[int]]] = {}  # post -> hour (epoch s) -> [upvotes, shares]

    def add(self, event: dict[str, Any]) -> None:
        """Counts one valid event dict; like the pipeline, it buckets a missing event_time by the time now."""
        event_time = event.get("event_time")
        seconds = datetime.fromisoformat(event_time).timestamp() if event_time is not None else time.time()
        self._count(event["post_id"], event["counter"], event["delta"], int(seconds // HOUR_S) * HOUR_S)

    def add_vote(self, vote: VoteEvent) -> None:
        self._count(vote.post_id, vote.counter, vote.delta, vote.event_hour)

    def add_invalid(self, n: int = 1) -> None:
        self.invalid += n

    def _count(self, post_id: str, counter: str, delta: int, hour_s: int) -> None:
        index = _COUNTER_INDEX[counter]
        self.events += 1
        self._posts.setdefault(post_id, [0, 0])[index] += delta
        self._hourly.setdefault(post_id, {}).setdefault(hour_s, [0, 0])[index] += delta

    @property
    def totals(self) -> dict[str, dict[str, int]]:
        """{post_id: {"upvotes": n, "shares": m}} for every post with a valid event, net 0 included."""
        return {post: dict(zip(COUNTERS, sums)) for post, sums in self._posts.items()}

    def hourly(self) -> dict[str, dict[str, dict[str, int]]]:
        """{post_id: {"2026-11-22T01:00:00Z": {"upvotes": n, "shares": m}}}, by event hour."""
        return {
            post: {_hour_text(hour): dict(zip(COUNTERS, sums)) for hour, sums in sorted(hours.items())}
            for post, hours in self._hourly.items()
        }

    def save(self, path: str | os.PathLike[str]) -> None:
        document = {"events": self.events, "invalid": self.invalid, "posts": self.totals, "hourly": self.hourly()}
        Path(path).write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Ledger:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
        ledger = cls()
        ledger.events, ledger.invalid = document["events"], document["invalid"]
        ledger._posts = {post: [sums[c] for c in COUNTERS] for post, sums in document["posts"].items()}
        ledger._hourly = {
            post: {_hour_seconds(hour): [sums[c] for c in COUNTERS] for hour, sums in hours.items()}
            for post, hours in document["hourly"].items()
        }
        return ledger


@dataclass(frozen=True)
class PublishReport:
    """published: messages Pub/Sub accepted, invalid ones included; invalid: deliberately invalid
    messages sent (publish_messages does not look inside messages and reports 0); failed:
    publishes that raised."""

    published: int
    invalid: int
    failed: int
    seconds: float

    @property
    def events_per_s(self) -> float:
        return self.published / self.seconds if self.seconds > 0 else 0.0


class _Pacer:
    """Spaces messages 1/rate apart on average, sleeping only once 2 ms ahead: smooth, no bursts."""

    def __init__(self, rate: float) -> None:
        self._interval = 1.0 / rate
        self._next = time.monotonic()

    def wait(self) -> None:
        self._next += self._interval
        ahead = self._next - time.monotonic()
        if ahead > 0.002:
            time.sleep(ahead)
        elif ahead < -0.1:
            self._next -= ahead  # fell behind (a slow publish): resume the pace, don't burst to catch up


def publish_messages(
    topic_path: str,
    messages: Iterable[tuple[bytes, dict[str, str]]],
    rate: float | None = None,
    total: int | None = None,
    progress: bool = True,
) -> PublishReport:
    """Publishes (data, attributes) pairs and waits for every one; failures are counted, not raised."""
    if rate is not None and rate <= 0:
        raise ValueError("rate must be positive")
    client = pubsub_v1.PublisherClient(batch_settings=BATCH_SETTINGS)
    pacer = _Pacer(rate) if rate else None
    pending: deque[Future] = deque()
    failed = 0

    def settle_oldest() -> None:
        nonlocal failed
        error = pending.popleft().exception()
        if error is not None:
            failed += 1
            if failed == 1:
                LOG.warning("publishing to %s failed (further failures are only counted): %s", topic_path, error)

    start = time.monotonic()
    sent = 0
    try:
        with Progress(total, "publish", enabled=progress) as bar:
            for data, attributes in messages:
                if pacer:
                    pacer.wait()
                pending.append(client.publish(topic_path, data, **attributes))
                sent += 1
                bar.advance()
                if len(pending) > MAX_PENDING:
                    settle_oldest()
            while pending:
                settle_oldest()
    finally:
        client.stop()
    return PublishReport(published=sent - failed, invalid=0, failed=failed, seconds=time.monotonic() - start)


def _attributes(fields: dict[str, Any]) -> dict[str, str]:
    """The event_id and event_time attributes: dedup ids and event timestamps for the reader."""
    return {name: fields[name] for name in ("event_id", "event_time") if isinstance(fields.get(name), str)}


def event_message(event: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    """An event's message: compact UTF-8 JSON, with its event_id and event_time as attributes."""
    return orjson.dumps(event), _attributes(event)


def _interleave(items: Iterator[T], extras: list[T], count: int) -> Iterator[T]:
    """`items` (`count` of them) with `extras` spread evenly among them."""
    placed = 0
    for index, item in enumerate(items):
        while placed < len(extras) and (placed + 1) * count // (len(extras) + 1) <= index:
            yield extras[placed]
            placed += 1
        yield item
    yield from extras[placed:]


def publish_workload(
    topic_path: str,
    workload: Workload,
    ledger_path: str | None = None,
    rate: float | None = None,
    progress: bool = True,
) -> tuple[PublishReport, Ledger]:
    """Publishes a generated workload, its invalid messages spread evenly among the valid ones."""
    ledger = Ledger()

    def valid_messages() -> Iterator[tuple[bytes, dict[str, str]]]:
        for event in generate_events(workload):
            ledger.add(event)
            yield event_message(event)

    invalid = [(payload, {}) for payload in invalid_payloads(workload.invalid, workload.seed)]
    ledger.add_invalid(len(invalid))
    messages = _interleave(valid_messages(), invalid, workload.events)
    report = publish_messages(topic_path, messages, rate, workload.events + workload.invalid, progress)
    if ledger_path:
        ledger.save(ledger_path)
    return replace(report, invalid=len(invalid)), ledger


def publish_file(
    topic_path: str,
    path: str,
    ledger_path: str | None = None,
    rate: float | None = None,
    progress: bool = True,
) -> tuple[PublishReport, Ledger]:
    """Publishes each line of a JSON-lines file as it is, without its line break.

    Lines that parse_vote rejects are published too (they exercise the dead-letter path)
    and counted as invalid; accepted ones go into the ledger and get the event_id and
    event_time attributes. Empty lines are skipped: Pub/Sub refuses an empty message.
    """
    # Imported here because transforms.parse imports Beam (about 1.5 s); generated workloads don't need it.
    from transforms.parse import parse_vote

    ledger = Ledger()

    def messages() -> Iterator[tuple[bytes, dict[str, str]]]:
        with open(path, "rb") as lines:
            for line in lines:
                data = line.rstrip(b"\r\n")
                if not data:
                    continue
                vote = parse_vote(data, None, publish_time_s=time.time())
                if isinstance(vote, VoteEvent):
                    ledger.add_vote(vote)
                    yield data, _attributes(orjson.loads(data))
                else:
                    ledger.add_invalid()
                    yield data, {}

    with open(path, "rb") as lines:
        total = sum(1 for line in lines if line.rstrip(b"\r\n"))
    report = publish_messages(topic_path, messages(), rate, total, progress)
    if ledger_path:
        ledger.save(ledger_path)
    return replace(report, invalid=ledger.invalid), ledger


# --- the `upvotes publish` subcommand ---------------------------------------------------

class UsageError(Exception):
    """Something the user can fix: reported in one line, exit status 2."""


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
        raise UsageError(f"no usable Google Cloud credentials ({error}); run: gcloud auth application-default "
                         'login, or use the emulators: eval "$(upvotes emulators start)"') from None
    except (exceptions.GoogleAPICallError, exceptions.RetryError) as error:
        hint = '; is it running? eval "$(upvotes emulators start)"' if emulator else ""
        raise UsageError(f"cannot reach {where}: {error}{hint}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--project", default=os.environ.get("GOOGLE_CLOUD_PROJECT", "demo-project"),
        help="Google Cloud project of the topic (default: $GOOGLE_CLOUD_PROJECT, else demo-project)",
    )
    parser.add_argument("--topic", required=True, help="topic to publish to: a bare name or projects/P/topics/T")
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--file", metavar="FILE",
        help="publish the lines of this JSON-lines file as they are, one message per line, instead of "
        "generated events; lines the pipeline would reject are published too and counted as invalid",
    )
    source.add_argument("--events", type=int, default=10_000, metavar="N",
                        help="number of valid events to generate (default: %(default)s)")
    generated = parser.add_argument_group("generated workload (without --file)")
    generated.add_argument("--posts", type=int, default=1000, metavar="M",
                           help="number of posts p-1..p-M the votes go to (default: %(default)s)")
    generated.add_argument("--zipf", type=float, default=1.2, metavar="S",
                           help="Zipf exponent of post popularity: higher is more skewed, 0 is even "
                           "(default: %(default)s)")
    generated.add_argument("--seed", type=int, default=0, metavar="X",
                           help="random seed; the same seed gives the same events (default: %(default)s)")
    generated.add_argument("--invalid", type=int, default=0, metavar="K",
                           help="invalid messages to mix in for the dead-letter path (default: %(default)s)")
    generated.add_argument("--unvote-fraction", type=float, default=0.1, metavar="F",
                           help="fraction of events that are un-votes, -1 upvote (default: %(default)s)")
    generated.add_argument("--share-fraction", type=float, default=0.2, metavar="F",
                           help="fraction of events that are shares, +1 share (default: %(default)s)")
    parser.add_argument("--rate", type=float, metavar="R",
                        help="publish at most R messages per second, evenly paced (default: as fast as possible)")
    parser.add_argument("--ledger", metavar="FILE",
                        help="write the exact expected totals (per post, and per post and event hour) "
                        "to this JSON file, for `upvotes verify`")
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="don't report progress on stderr")


def run(args: argparse.Namespace) -> int:
    try:
        topic_path = resolve_topic(args.project, args.topic)
        if args.rate is not None and args.rate <= 0:
            raise UsageError("--rate must be positive")
        if args.file and not os.path.isfile(args.file):
            raise UsageError(f"no such file: {args.file}")
        if args.ledger and not Path(args.ledger).resolve().parent.is_dir():
            raise UsageError(f"the directory of the ledger {args.ledger} does not exist")
        try:
            workload = None if args.file else Workload(
                events=args.events, posts=args.posts, zipf=args.zipf, seed=args.seed, invalid=args.invalid,
                unvote_fraction=args.unvote_fraction, share_fraction=args.share_fraction,
            )
        except ValueError as error:
            raise UsageError(str(error)) from None
        _check_topic(topic_path)
        if workload is None:
            report, _ = publish_file(topic_path, args.file, args.ledger, args.rate, args.progress)
        else:
            report, _ = publish_workload(topic_path, workload, args.ledger, args.rate, args.progress)
    except (UsageError, OSError) as error:
        print(f"upvotes publish: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("upvotes publish: interrupted; no ledger written", file=sys.stderr)
        return 130
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
