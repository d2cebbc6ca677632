"""Generated workloads: a viral stream of valid votes, and invalid messages for the dead-letter path.

A `Workload` sends each delta event to post `p-<rank>`, the rank drawn from a Zipf distribution,
so a few posts take most of the votes. A `VoteStateWorkload` sends vote-state events (one vote per
user, schemas/vote_states.py) the same way, with what makes them hard to count: duplicates, events
arriving after later ones of the same user, and users flipping up -> down -> none -> up.
`invalid_payloads` makes messages with exactly one defect each, cycling through every reason the
contract rejects a message for.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import itertools
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import orjson

from schemas.counters import COUNTERS, RANKING

# The counters a workload sends besides the ranking counter (upvotes, which takes the rest),
# with the share of events each gets unless told otherwise (schemas/counters.py).
OTHER_COUNTERS = tuple(counter for counter in COUNTERS if counter is not RANKING)
DEFAULT_FRACTIONS: Mapping[str, float] = {counter.name: counter.generated_fraction for counter in OTHER_COUNTERS}
UPVOTES_ONLY: Mapping[str, float] = {counter.name: 0.0 for counter in OTHER_COUNTERS}

SPAN_MS = 2 * 3600 * 1000  # by default, generated event times cover the two hours before the start time
# Events per message for generated workloads: each message costs the same fixed work in Pub/Sub
# and in the pipeline whatever it carries (see docs/benchmarks.md); 500 events of about
# 200 bytes are about 100 KB, well inside the 1 MB batch limit.
DEFAULT_BATCH_SIZE = 500


@dataclass(frozen=True)
class Workload:
    """A viral workload, deterministic for a given seed and start_time.

    Each event goes to post `<post_prefix><rank>` (p-<rank> by default), the rank drawn from
    Zipf(zipf) over `posts` posts (p-1 is the hottest). It is +1 of another counter than upvotes
    with the probability `fractions` gives it (by counter name; DEFAULT_FRACTIONS for those it
    does not name), an un-vote (-1 upvotes) with probability unvote_fraction, otherwise an
    upvote (+1).
    Event times rise through the span_ms milliseconds before start_time (default: now; a naive
    datetime is taken as UTC). The default span, two hours, makes at least two event hours
    appear; a burst of live votes, stamped as they are cast, is a span of a few seconds.
    """

    events: int
    posts: int
    zipf: float = 1.2
    seed: int = 0
    unvote_fraction: float = 0.1
    fractions: Mapping[str, float] = field(default_factory=dict)
    invalid: int = 0
    start_time: datetime | None = None
    post_prefix: str = "p-"  # post IDs are <post_prefix><rank>
    voters: int = 1_000_000  # user IDs are u-0 .. u-<voters - 1>, drawn uniformly
    span_ms: int = SPAN_MS

    def __post_init__(self) -> None:
        if self.events < 0 or self.invalid < 0:
            raise ValueError("the numbers of events and invalid messages must not be negative")
        if self.span_ms < 0:
            raise ValueError("the span of event times must not be negative")
        if self.posts < 1:
            raise ValueError("posts must be at least 1")
        if self.voters < 1:
            raise ValueError("voters must be at least 1")
        if self.zipf < 0:
            raise ValueError("the Zipf exponent must not be negative (0 spreads votes evenly)")
        unknown = set(self.fractions) - set(DEFAULT_FRACTIONS)
        if unknown:
            raise ValueError(
                f"no fraction can be given for {', '.join(sorted(unknown))}: only for {', '.join(DEFAULT_FRACTIONS)}"
            )
        fractions = (self.unvote_fraction, *self.counter_fractions.values())
        if min(fractions) < 0 or sum(fractions) > 1:
            raise ValueError(
                f"the fractions of un-votes and of {', '.join(DEFAULT_FRACTIONS)} must be at least 0 "
                "and add up to at most 1"
            )

    @property
    def counter_fractions(self) -> dict[str, float]:
        """The share of events of each counter other than upvotes, by name."""
        return {name: self.fractions.get(name, default) for name, default in DEFAULT_FRACTIONS.items()}


def _zipf_ranks(posts: int, zipf: float, rng: random.Random) -> Callable[[], int]:
    """Draws post ranks 1..posts from Zipf(zipf)."""
    cumulative = list(itertools.accumulate(rank**-zipf for rank in range(1, posts + 1)))
    weight = cumulative[-1]
    # min(): a draw rounding up to exactly `weight` would index one past the last post.
    return lambda: min(bisect.bisect_right(cumulative, rng.random() * weight), posts - 1) + 1


def _start_ms(start_time: datetime | None) -> int:
    start = start_time or datetime.now(timezone.utc)
    return int((start if start.tzinfo else start.replace(tzinfo=timezone.utc)).timestamp() * 1000)


def generate_events(workload: Workload) -> Iterator[dict[str, Any]]:
    """The workload's valid events, as dicts following schemas/vote_event.schema.json."""
    rng = random.Random(workload.seed)
    draw_rank = _zipf_ranks(workload.posts, workload.zipf, rng)
    start_ms = _start_ms(workload.start_time)
    # Each kind of event below a cut of the unit interval: the other counters, un-votes, upvotes.
    cuts = list(
        zip(
            itertools.accumulate(workload.counter_fractions.values()),
            [(counter.contract_name, 1) for counter in OTHER_COUNTERS],
        )
    )
    cuts.append(((cuts[-1][0] if cuts else 0.0) + workload.unvote_fraction, (RANKING.contract_name, -1)))
    for index in range(workload.events):
        rank = draw_rank()
        kind = rng.random()
        counter, delta = next((event for cut, event in cuts if kind < cut), (RANKING.contract_name, 1))
        # Rising times with jitter, like a live stream, ending just before start_time.
        event_ms = start_ms - int(workload.span_ms * (workload.events - index - rng.random()) / workload.events)
        yield {
            "post_id": f"{workload.post_prefix}{rank}",
            "counter": counter,
            "delta": delta,
            "event_id": uuid4_text(rng.getrandbits(128)),
            "event_time": _rfc3339_ms(event_ms),
            "user_id": f"u-{rng.randrange(workload.voters)}",
        }


# uuid.UUID(int=n, version=4)'s version and variant bits, set on the integer itself: str(uuid.UUID(...))
# was a fifth of generating an event, which the race's senders do on the clock (bench/write_back.py).
_UUID4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_UUID4_SET = (4 << 76) | (0x8000 << 48)


def uuid4_text(bits: int) -> str:
    """str(uuid.UUID(int=bits, version=4)), made without the UUID object."""
    text = f"{(bits & _UUID4_CLEAR) | _UUID4_SET:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


@functools.lru_cache(maxsize=4)
def _rfc3339_second(epoch_s: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_s))


def _rfc3339_ms(epoch_ms: int) -> str:
    return f"{_rfc3339_second(epoch_ms // 1000)}.{epoch_ms % 1000:03d}Z"


def _rfc3339_us(epoch_us: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_us // 1_000_000)) + f".{epoch_us % 1_000_000:06d}Z"


# The next vote of a user who changes their vote: up -> down -> none -> up.
FLIPS = {"up": "down", "down": "none", "none": "up"}
LATE_BY_EVENTS = 2_000  # a late event arrives up to this many events after its place
RECENT_PAIRS = 10_000  # the (post, user) pairs a flip or a duplicate is drawn from


@dataclass(frozen=True)
class VoteStateWorkload:
    """A viral workload of vote-state events (one vote per user), deterministic for a seed and start_time.

    Of the `events` events: a `duplicate_fraction` repeat an earlier event exactly (a retried
    request, a republished message); a `flip_fraction` change the vote of a user who voted recently
    (up -> down -> none -> up); the rest are a user's first vote on a post, drawn from `voters` users
    and posts p-<rank> by Zipf(zipf) over `posts` (posts=1: one viral post), "down" with probability
    `down_fraction`, else "up". Event times rise through the two hours before start_time, to the
    microsecond; a `late_fraction` of events arrive up to LATE_BY_EVENTS events after events that
    are newer than them (out of order, across messages and windows).
    """

    events: int
    posts: int
    zipf: float = 1.2
    seed: int = 0
    voters: int = 1_000_000
    down_fraction: float = 0.2
    flip_fraction: float = 0.2
    duplicate_fraction: float = 0.1
    late_fraction: float = 0.1
    invalid: int = 0
    start_time: datetime | None = None
    post_prefix: str = "p-"

    def __post_init__(self) -> None:
        if self.events < 0 or self.invalid < 0 or self.posts < 1 or self.voters < 1 or self.zipf < 0:
            raise ValueError(
                "events and invalid must not be negative, posts and voters must be at least 1, "
                "the Zipf exponent must not be negative"
            )
        fractions = (self.down_fraction, self.flip_fraction, self.duplicate_fraction, self.late_fraction)
        if not all(0 <= f <= 1 for f in fractions) or self.flip_fraction + self.duplicate_fraction > 1:
            raise ValueError(
                "the down, flip, duplicate and late fractions must be between 0 and 1, and flips "
                "and duplicates add up to at most 1"
            )


def generate_vote_states(workload: VoteStateWorkload) -> Iterator[dict[str, Any]]:
    """The workload's events, in arrival order, as dicts following schemas/vote_event.schema.json."""
    rng = random.Random(workload.seed)
    draw_rank = _zipf_ranks(workload.posts, workload.zipf, rng)
    start_us = _start_ms(workload.start_time) * 1000
    span_us = SPAN_MS * 1000
    recent_pairs: list[tuple[str, str]] = []  # a ring of pairs that voted
    votes: dict[tuple[str, str], str] = {}  # the last vote of each pair in the ring (memory stays flat)
    recent_events: list[dict[str, Any]] = []  # a ring of events sent, for duplicates
    held: list[tuple[int, int, dict[str, Any]]] = []  # late events: (arrival index, order, event)

    def remember(ring: list, item, index: int):
        """Puts `item` in the ring; returns the item it replaced, if any."""
        if len(ring) < RECENT_PAIRS:
            ring.append(item)
            return None
        evicted, ring[index % RECENT_PAIRS] = ring[index % RECENT_PAIRS], item
        return evicted

    for index in range(workload.events):
        while held and held[0][0] <= index:
            yield heapq.heappop(held)[2]
        kind = rng.random()
        if recent_events and kind < workload.duplicate_fraction:
            event = dict(rng.choice(recent_events))
        else:
            if recent_pairs and kind < workload.duplicate_fraction + workload.flip_fraction:
                pair = rng.choice(recent_pairs)
                vote = FLIPS[votes[pair]]
            else:
                pair = (f"{workload.post_prefix}{draw_rank()}", f"u-{rng.randrange(workload.voters)}")
                vote = "down" if rng.random() < workload.down_fraction else "up"
                if pair not in votes:
                    votes.pop(remember(recent_pairs, pair, index), None)
            votes[pair] = vote
            at_us = start_us - int(span_us * (workload.events - index - rng.random()) / workload.events)
            event = {
                "post_id": pair[0],
                "user_id": pair[1],
                "vote": vote,
                "event_time": _rfc3339_us(at_us),
                "event_id": uuid4_text(rng.getrandbits(128)),
            }
            remember(recent_events, event, index)
        if rng.random() < workload.late_fraction:
            heapq.heappush(held, (index + rng.randint(1, LATE_BY_EVENTS), index, event))
            continue
        yield event
    while held:
        yield heapq.heappop(held)[2]


@dataclass(frozen=True)
class RealTrafficWorkload:
    """Traffic as an app sends it (issue 45), deterministic for a seed and start_time: one vote per
    message, most posts getting a vote or two while a few go viral, and signed-in users' votes as
    vote states.

    Of the `events` events, a `head_fraction` go to posts drawn from Zipf(zipf) over `posts` (the
    viral head: p-1 is the hottest) and the rest uniformly over the same `posts` (the long tail). A
    `state_fraction` are vote states, each by a user of its own (one vote per user and post), of
    which a `flip_fraction` change the vote of a user who voted recently (up -> down -> none ->
    up); the rest are delta events (+1 upvote). Event times are live: they rise through the
    `span_ms` milliseconds before start_time, as votes are stamped when they are cast.
    """

    events: int
    posts: int
    zipf: float = 1.1
    head_fraction: float = 0.5
    state_fraction: float = 0.5
    flip_fraction: float = 0.1
    seed: int = 0
    start_time: datetime | None = None
    span_ms: int = 1_000
    post_prefix: str = "p-"
    invalid: int = 0  # invalid messages mixed in (upvotes.devtools.publishing.publish_workload)

    def __post_init__(self) -> None:
        if self.events < 0 or self.invalid < 0 or self.posts < 1 or self.zipf < 0 or self.span_ms < 0:
            raise ValueError(
                "events and span_ms must not be negative, posts must be at least 1, the Zipf "
                "exponent must not be negative"
            )
        if not all(0 <= f <= 1 for f in (self.head_fraction, self.state_fraction, self.flip_fraction)):
            raise ValueError("the head, state and flip fractions must be between 0 and 1")


def generate_real_traffic(workload: RealTrafficWorkload) -> Iterator[dict[str, Any]]:
    """The workload's events, in arrival order, as dicts following schemas/vote_event.schema.json."""
    rng = random.Random(workload.seed)
    draw_head = _zipf_ranks(workload.posts, workload.zipf, rng)
    start_us = _start_ms(workload.start_time) * 1000
    span_us = workload.span_ms * 1000
    recent: list[tuple[str, str]] = []  # a ring of (post, user) pairs that voted, for flips
    votes: dict[tuple[str, str], str] = {}  # each ring pair's last vote
    users = 0
    for index in range(workload.events):
        at_us = start_us - int(span_us * (workload.events - index - rng.random()) / max(workload.events, 1))
        rank = draw_head() if rng.random() < workload.head_fraction else rng.randint(1, workload.posts)
        post = f"{workload.post_prefix}{rank}"
        event_id = uuid4_text(rng.getrandbits(128))
        if rng.random() >= workload.state_fraction:
            yield {
                "post_id": post,
                "counter": RANKING.contract_name,
                "delta": 1,
                "event_id": event_id,
                "event_time": _rfc3339_us(at_us),
            }
            continue
        if recent and rng.random() < workload.flip_fraction:
            pair = rng.choice(recent)
            vote = FLIPS[votes[pair]]
        else:
            pair, vote = (post, f"u-{users}"), "up"
            users += 1
            if len(recent) < RECENT_PAIRS:
                recent.append(pair)
            else:
                votes.pop(recent[index % RECENT_PAIRS], None)
                recent[index % RECENT_PAIRS] = pair
        votes[pair] = vote
        yield {
            "post_id": pair[0],
            "user_id": pair[1],
            "vote": vote,
            "event_time": _rfc3339_us(at_us),
            "event_id": event_id,
        }


def generate(workload: Workload | VoteStateWorkload | RealTrafficWorkload) -> Iterator[dict[str, Any]]:
    """The valid events of any kind of workload."""
    if isinstance(workload, RealTrafficWorkload):
        return generate_real_traffic(workload)
    return generate_vote_states(workload) if isinstance(workload, VoteStateWorkload) else generate_events(workload)


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
            "counter": RANKING.contract_name,
            "delta": 1,
            "event_id": uuid4_text(rng.getrandbits(128)),
            "event_time": "2026-11-22T01:02:03.456Z",
        }
        payloads.append(INVALID_KINDS[index % len(INVALID_KINDS)][1](vote))
    return payloads
