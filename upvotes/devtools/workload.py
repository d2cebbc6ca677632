"""Generated workloads: a viral stream of valid votes, and invalid messages for the dead-letter path.

A `Workload` sends each event to post `p-<rank>`, the rank drawn from a Zipf distribution,
so a few posts take most of the votes. `invalid_payloads` makes messages with exactly one
defect each, cycling through every reason the contract rejects a message for.
"""
from __future__ import annotations

import bisect
import itertools
import random
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, Mapping

import orjson

from schemas.counters import COUNTERS, RANKING

# The counters a workload sends besides the ranking counter (upvotes, which takes the rest),
# with the share of events each gets unless told otherwise (schemas/counters.py).
OTHER_COUNTERS = tuple(counter for counter in COUNTERS if counter is not RANKING)
DEFAULT_FRACTIONS: Mapping[str, float] = {counter.name: counter.generated_fraction for counter in OTHER_COUNTERS}
UPVOTES_ONLY: Mapping[str, float] = {counter.name: 0.0 for counter in OTHER_COUNTERS}

SPAN_MS = 2 * 3600 * 1000  # generated event times cover the two hours before the start time
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
    Event times rise through the two hours before start_time (default: now; a naive
    datetime is taken as UTC), so at least two event hours appear.
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

    def __post_init__(self) -> None:
        if self.events < 0 or self.invalid < 0:
            raise ValueError("the numbers of events and invalid messages must not be negative")
        if self.posts < 1:
            raise ValueError("posts must be at least 1")
        if self.voters < 1:
            raise ValueError("voters must be at least 1")
        if self.zipf < 0:
            raise ValueError("the Zipf exponent must not be negative (0 spreads votes evenly)")
        unknown = set(self.fractions) - set(DEFAULT_FRACTIONS)
        if unknown:
            raise ValueError(f"no fraction can be given for {', '.join(sorted(unknown))}: only for "
                             f"{', '.join(DEFAULT_FRACTIONS)}")
        fractions = (self.unvote_fraction, *self.counter_fractions.values())
        if min(fractions) < 0 or sum(fractions) > 1:
            raise ValueError(f"the fractions of un-votes and of {', '.join(DEFAULT_FRACTIONS)} must be at least 0 "
                             "and add up to at most 1")

    @property
    def counter_fractions(self) -> dict[str, float]:
        """The share of events of each counter other than upvotes, by name."""
        return {name: self.fractions.get(name, default) for name, default in DEFAULT_FRACTIONS.items()}


def generate_events(workload: Workload) -> Iterator[dict[str, Any]]:
    """The workload's valid events, as dicts following schemas/vote_event.schema.json."""
    rng = random.Random(workload.seed)
    cumulative = list(itertools.accumulate(rank ** -workload.zipf for rank in range(1, workload.posts + 1)))
    weight = cumulative[-1]
    start = workload.start_time or datetime.now(timezone.utc)
    start_ms = int((start if start.tzinfo else start.replace(tzinfo=timezone.utc)).timestamp() * 1000)
    # Each kind of event below a cut of the unit interval: the other counters, un-votes, upvotes.
    cuts = list(zip(itertools.accumulate(workload.counter_fractions.values()),
                    [(counter.contract_name, 1) for counter in OTHER_COUNTERS]))
    cuts.append(((cuts[-1][0] if cuts else 0.0) + workload.unvote_fraction, (RANKING.contract_name, -1)))
    for index in range(workload.events):
        # min(): a draw rounding up to exactly `weight` would index one past the last post.
        rank = min(bisect.bisect_right(cumulative, rng.random() * weight), workload.posts - 1) + 1
        kind = rng.random()
        counter, delta = next((event for cut, event in cuts if kind < cut), (RANKING.contract_name, 1))
        # Rising times with jitter, like a live stream, ending just before start_time.
        event_ms = start_ms - int(SPAN_MS * (workload.events - index - rng.random()) / workload.events)
        yield {
            "post_id": f"{workload.post_prefix}{rank}",
            "counter": counter,
            "delta": delta,
            "event_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "event_time": _rfc3339_ms(event_ms),
            "user_id": f"u-{rng.randrange(workload.voters)}",
        }


def _rfc3339_ms(epoch_ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_ms // 1000)) + f".{epoch_ms % 1000:03d}Z"


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
            "event_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "event_time": "2026-11-22T01:02:03.456Z",
        }
        payloads.append(INVALID_KINDS[index % len(INVALID_KINDS)][1](vote))
    return payloads
