"""ParseVotes: Pub/Sub messages parsed and their votes summed per post and event hour, one
element per shard of posts per bundle; vote-state events merged to the latest per post and user,
one element per shard of users per bundle; rejected events to the dead letters, counted by reason.

The rules are the event contract's (schemas/contract.py), shared with the publishers and the
HTTP service. Why parse and sum in one pass, and sum here rather than downstream: Beam's cost
is per element (more than parsing a vote), so no element
is made per vote or per message, only one per shard of posts per bundle.

- `sum_message`: one message parsed and folded into a bundle's running sums in one pass. For
  batches the pipeline's cost is this loop, once per vote, and parse_message spends most of
  it on calls (a dict, a VoteEvent, event_hour, the policy) that the common event does not
  need. Here each line is decoded in one call into the contract's `CommonVote` (msgspec checks
  keys, types and limits as it decodes); a common vote (delta not 0, no time or a UTC time
  whose whole hour lies inside the policy's bounds) is summed at once; a common vote with fields
  of its own is read with orjson and the same checks; anything else takes
  `schemas.contract.parse_line`, the specification, for that line alone. Same results as
  summing parse_message's (property tests hold the two together, on generated batches and on
  common votes edited byte by byte).
- `BundleSums`: the running sums of one bundle, emitted when the bundle ends as one
  (shard, ShardSums) element per shard of posts, stamped with that moment as their
  ingestion time (what transforms/windowing.py windows by). The bundle is not yet committed
  when it emits, so the watermark is still held behind it.
- The local reader's pulls (lists of messages, transforms/read_votes.py) come already stamped
  with their ingestion time, by the reader, as the element's timestamp: their sums are kept
  per pull stamp and emitted with it. That stamp is recorded with the pull in the local
  stream's message log, so a pull replayed after a crash is summed into the same window as the
  first time (local_runner/exactly_once.py).
- The ingestion time is the worker's clock, but never earlier than the latest publish time
  among the bundle's messages (`ingestion_time`). The watermark follows Pub/Sub's clock (the
  publish times of the messages not yet processed, this bundle's among them), not the
  worker's: a worker whose clock lags Pub/Sub's by more than a window and the allowed
  lateness would otherwise stamp its sums into a window already closed, and Beam drops those
  silently (tests/test_windowing.py holds both). The votes of such bundles are counted in
  ParseVotes/stamped_ahead_of_worker_clock: a clock that needs fixing, though no vote is lost.
- Vote-state events (schemas/vote_states.py) are not sums: a bundle keeps each (post, user)'s
  latest state (`later`), and emits one (shard, ShardVotes) element per shard of users, the
  shard the user's range of the Votes key space (`vote_shard`), so that the sink's transactions
  each touch one contiguous range of Votes rows (transforms/vote_state_sink.py).

Why the grouping key is a shard of posts (SUM_SHARDS of them) and not the post: a runner's
cost is per key and per element (on the DirectRunner during a viral burst, its trigger driver
and per-key state copies took most of the pipeline's CPU: docs/benchmarks.md, "Measurements behind the code"), while
merging two dicts of sums costs little. The shard is a stable hash of the
post (schemas.post_hash), so a post's sums meet in one shard on every worker and every run:
one delta per post, hour and pane. The grouping key also carries the shard count it was
computed with (schemas/delta_ids.py `shard_key`, `shards_of_key`): an in-place update may change the count while
windows of the old layout are still open, and their panes must keep their own delta keys
(transforms/windowing.py `delta_id`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

import apache_beam as beam
import orjson
from apache_beam.io.gcp.pubsub import PubsubMessage
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils.timestamp import Timestamp
from msgspec import UNSET

from schemas import user_hash
from schemas.contract import (
    ABSENT,
    COMMON_ENDINGS,
    COMMON_FRACTION,
    COMMON_VOTE_ERRORS,
    DEFAULT_EVENT_TIME_POLICY,
    MAX_HOUR_S,
    MIN_HOUR_S,
    VOTE_FIELD,
    CommonVote,
    EventTimePolicy,
    common_hour,
    common_lines,
    decode_common_vote,
    is_common_vote,
    parse_line,
    parse_message,
    parse_vote,
    reason_of,
    trusted_hours,
)
from schemas.counters import CONTRACT_NAMES, VOTER_CONTRACT_NAMES, by_contract_name
from schemas.delta_ids import sum_shard
from schemas.records import HOUR_S, CounterSums, PostHour, PostUser, Rejected, VoteEvent, VoteState
from schemas.vote_states import LatestVote, keep_latest
from schemas.voter_sketch import sketch_of

ShardSums = dict[PostHour, CounterSums]  # one shard's sums (and voter sketches), per post and event hour
ShardVotes = dict[PostUser, LatestVote]  # one shard's latest vote states, per post and user
# Shards of the Votes key space (ranges of UserHash) that vote states are grouped by.
VOTE_SHARDS = 32
# A worker clock behind the latest publish time by less is ordinary drift and delivery jitter:
# its bundles are stamped at the publish time all the same, but not counted as a lagging clock.
CLOCK_BEHIND_COUNTED_S = 1.0


def vote_shard(user_id: str, shards: int = VOTE_SHARDS) -> int:
    """The grouping key of a user's vote states: the range of the Votes key space (UserHash leads
    it) the user's rows are in, so a shard's states are one contiguous range of rows."""
    return user_hash(user_id) * shards >> 63


@dataclass(slots=True)
class RunningSums:
    """A bundle's sums so far for one post and event hour, updated in place once per vote:
    the net delta per counter (by contract name), the votes, the voters' user IDs."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CONTRACT_NAMES, 0))
    events: int = 0
    voters: set[str] | None = None

    def to_sums(self) -> CounterSums:
        """The record the rest of the pipeline carries, the voters as a sketch."""
        return CounterSums(
            by_contract_name(self.counts), self.events, None if self.voters is None else sketch_of(self.voters)
        )


Running = dict[tuple[str, int], RunningSums]  # (post_id, event hour) -> its running sums


def sum_message(
    data: bytes,
    attributes: Mapping[str, str] | None,
    publish_time_s: float,
    sums: Running,
    policy: EventTimePolicy | None = None,
    on_ingestion_hour: Callable[[str], None] | None = None,
    *,
    states: ShardVotes,
) -> list[Rejected]:
    """parse_message folded into `sums` and `states` in one pass (see the module docstring): the
    accepted delta events are added to `sums` (and the user_id of each with a positive delta on a
    counter that records voters to the post and hour's voters), the vote-state events merged into
    `states` (the latest per post and user), the rejected ones returned."""
    numbered = common_lines(data, attributes)
    if numbered is None:  # a whole-message rule to check: the specification judges it all
        rejected: list[Rejected] = []
        for result in parse_message(data, attributes, publish_time_s, policy, on_ingestion_hour):
            _add_result(result, sums, states, rejected)
        return rejected
    first_number, lines = numbered
    votes: list[CommonVote | None]
    try:
        votes = list(map(decode_common_vote, lines))  # called from C: cheaper than one call per line here
    except COMMON_VOTE_ERRORS:
        votes = list(map(_common_vote_or_none, lines))  # a line of another shape: decoded one by one
    rejected = []
    first_hour, last_hour = trusted_hours(publish_time_s, policy)
    index = -1  # counted up per line: cheaper than enumerate for the one line of a v1 message
    for vote in votes:
        index += 1
        hour = None
        if vote is not None and vote.delta:
            event_time = vote.event_time
            if event_time is UNSET:  # the publish time's hour, when storable
                if MIN_HOUR_S <= publish_time_s < MAX_HOUR_S + HOUR_S:
                    hour = int(publish_time_s // HOUR_S) * HOUR_S
            else:
                hour = common_hour(event_time[:19])
                # A common UTC time in an hour the policy trusts to the last second, else the general path.
                if hour is not None and not (
                    first_hour <= hour <= last_hour
                    and (event_time[19:] in COMMON_ENDINGS or COMMON_FRACTION.match(event_time, 19))
                ):
                    hour = None
            if hour is not None:
                # _add_result's addition, inline: a call per vote costs a tenth of the vote.
                post_id, counter, delta, user_id = vote.post_id, vote.counter, vote.delta, vote.user_id
                acc = sums.get((post_id, hour))
                if acc is None:
                    acc = sums[(post_id, hour)] = RunningSums()
                acc.counts[counter] += delta
                acc.events += 1
                if delta > 0 and user_id is not UNSET and counter in VOTER_CONTRACT_NAMES:  # schemas/voter_sketch.py
                    if acc.voters is None:
                        acc.voters = {user_id}
                    else:
                        acc.voters.add(user_id)
                continue
        line, number = lines[index], first_number + index
        if number and not line.strip():
            continue  # a blank line of a batch: skipped, though it keeps its number
        _add_result(
            (vote is None and _common_with_other_fields(line, publish_time_s, first_hour, last_hour))
            or (
                parse_line(number, line, attributes, publish_time_s, policy, on_ingestion_hour)
                if number
                else parse_vote(line, attributes, publish_time_s, policy, on_ingestion_hour)
            ),
            sums,
            states,
            rejected,
        )
    return rejected


def _common_with_other_fields(
    line: bytes, publish_time_s: float, first_hour: float, last_hour: float
) -> VoteEvent | None:
    """The line's event when it is a common vote but for fields the contract ignores (which
    CommonVote does not decode: see its docstring), read with orjson as the specification reads
    it and checked with the same pieces as the fast path; None for anything else. Why: a
    publisher that adds a field of its own would otherwise pay the whole specification per vote."""
    try:
        fields = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if type(fields) is not dict or VOTE_FIELD in fields:
        return None
    get = fields.get
    # Any: their types are checked at run time, by is_common_vote, in bulk.
    post_id: Any
    counter: Any
    delta: Any
    post_id, counter, delta, event_id, user_id = (
        get("post_id"),
        get("counter"),
        get("delta"),
        get("event_id", ABSENT),
        get("user_id", ABSENT),
    )
    if not is_common_vote(post_id, counter, delta, event_id, user_id):
        return None
    event_time = get("event_time", ABSENT)
    hour: int | None
    if event_time is ABSENT:
        if not MIN_HOUR_S <= publish_time_s < MAX_HOUR_S + HOUR_S:
            return None
        hour = int(publish_time_s // HOUR_S) * HOUR_S
    elif type(event_time) is not str:
        return None
    else:
        hour = common_hour(event_time[:19])
        if hour is None or not (
            first_hour <= hour <= last_hour
            and (event_time[19:] in COMMON_ENDINGS or COMMON_FRACTION.match(event_time, 19))
        ):
            return None
    return VoteEvent(
        post_id, counter, delta, hour, None if event_id is ABSENT else event_id, None if user_id is ABSENT else user_id
    )


def _common_vote_or_none(line: bytes) -> CommonVote | None:
    """The line's CommonVote; None for a line of any other shape."""
    try:
        return decode_common_vote(line)
    except COMMON_VOTE_ERRORS:
        return None


def _add_result(
    result: VoteEvent | VoteState | Rejected, sums: Running, states: ShardVotes, rejected: list[Rejected]
) -> None:
    """One result of the specification (parse_vote, parse_line) added where it belongs: a delta
    event to `sums` (its user_id to the voters as sum_message says), a vote state merged into
    `states`, a rejection appended to `rejected`."""
    if isinstance(result, Rejected):
        rejected.append(result)
    elif isinstance(result, VoteState):
        keep_latest(states, PostUser(result.post_id, result.user_id), result.latest())
    else:
        acc = sums.get((result.post_id, result.event_hour))
        if acc is None:
            acc = sums[(result.post_id, result.event_hour)] = RunningSums()
        acc.counts[result.counter] += result.delta
        acc.events += 1
        if result.delta > 0 and result.user_id is not None and result.counter in VOTER_CONTRACT_NAMES:
            if acc.voters is None:
                acc.voters = {result.user_id}
            else:
                acc.voters.add(result.user_id)


def ingestion_time(worker_now_s: float, latest_publish_s: float) -> float:
    """A bundle's ingestion time: the worker's clock, never earlier than the latest publish time
    among its messages, which hold the watermark (see the module docstring)."""
    return max(worker_now_s, latest_publish_s)


class BundleSums:
    """Sums per (post, event hour) over one bundle, emitted when the bundle ends (see the module
    docstring). ParseVotes keeps one per bundle, so no element is made per vote at all."""

    def __init__(self) -> None:
        self._sums: Running = {}
        self._states: ShardVotes = {}
        self.latest_publish_s = float("-inf")  # the latest publish time among the bundle's messages

    def add_message(
        self,
        data: bytes,
        attributes: Mapping[str, str] | None,
        publish_time_s: float,
        policy: EventTimePolicy | None,
        on_ingestion_hour: Callable[[str], None],
    ) -> list[Rejected]:
        """Adds the message's accepted votes; returns its rejected events."""
        if publish_time_s > self.latest_publish_s:
            self.latest_publish_s = publish_time_s
        return sum_message(data, attributes, publish_time_s, self._sums, policy, on_ingestion_hour, states=self._states)

    @property
    def votes(self) -> int:
        """The accepted events so far, delta and vote-state events alike."""
        return sum(acc.events for acc in self._sums.values()) + sum(state.events for state in self._states.values())

    def emit_states(self, at: float | Timestamp) -> Iterator:
        """One element per shard of users: (shard, ShardVotes), stamped `at` (its ingestion time)."""
        shards: dict[int, ShardVotes] = {}
        for key, state in self._states.items():
            shards.setdefault(vote_shard(key.user_id), {})[key] = state
        for shard, states in shards.items():
            yield GlobalWindows.windowed_value((shard, states), timestamp=cast(Timestamp, at))  # see emit

    def emit(self, at: float | Timestamp) -> Iterator:
        """One element per shard: (shard, ShardSums), stamped `at` (its ingestion time)."""
        shards: dict[int, ShardSums] = {}
        shard_of: dict[str, int] = {}
        for (post_id, event_hour), acc in self._sums.items():
            shard = shard_of.get(post_id)
            if shard is None:
                shard = shard_of[post_id] = sum_shard(post_id)
            shards.setdefault(shard, {})[PostHour(post_id, event_hour)] = acc.to_sums()
        for shard, sums in shards.items():
            # Beam annotates a Timestamp; its WindowedValue takes a float (seconds) as well.
            yield GlobalWindows.windowed_value((shard, sums), timestamp=cast(Timestamp, at))


class ParsedVotes(NamedTuple):
    sums: beam.PCollection  # of (shard, ShardSums): per post and event hour per bundle, at ingestion time
    states: beam.PCollection  # of (shard, ShardVotes): the latest per post and user per bundle, at ingestion time
    rejected: beam.PCollection  # of Rejected


class _ParseAndSumFn(beam.DoFn):
    REJECTED = "rejected"
    STATES = "states"

    def __init__(self, policy: EventTimePolicy) -> None:
        self._policy = policy

    def start_bundle(self) -> None:
        self._sums = BundleSums()
        self._pulls: dict[int, BundleSums] = {}  # the local reader's pulls, by their ingestion stamp (us)
        # Counted locally and reported once per bundle: a metric update per vote costs more
        # than parsing it.
        self._rejected: Counter[str] = Counter()
        self._ingestion_hour: Counter[str] = Counter()
        self._on_ingestion_hour = self._count_ingestion_hour  # bound once, not once per message
        self._messages = 0

    def process(self, message: PubsubMessage | list[PubsubMessage], windowed=beam.DoFn.WindowedValueParam):
        # Runs once per element, so Beam's per-element cost counts: the element's timestamp is read
        # as its microseconds (float(TimestampParam) exactly, without making a Timestamp per
        # message), and a message without rejections returns an empty tuple, not a generator.
        if isinstance(message, list):  # a whole pull of the local reader (transforms/read_votes.py)
            rejected = self._add_pull(message, windowed.timestamp_micros)
        else:
            self._messages += 1
            rejected = self._sums.add_message(
                message.data or b"",
                message.attributes,
                windowed.timestamp_micros / 1_000_000,
                self._policy,
                self._on_ingestion_hour,
            )
        if not rejected:
            return ()
        for each in rejected:
            self._rejected[reason_of(each)] += 1
        return [beam.pvalue.TaggedOutput(self.REJECTED, each) for each in rejected]

    def _add_pull(self, messages: list[PubsubMessage], stamp_us: int) -> list[Rejected]:
        """Every message of one pull, each with its own publish time (its `publish_time`, the Beam
        Timestamp it would have been stamped with as an element of its own), into the sums of the
        pull's ingestion stamp (the element's timestamp: see the module docstring)."""
        self._messages += len(messages)
        sums = self._pulls.get(stamp_us)
        if sums is None:
            sums = self._pulls[stamp_us] = BundleSums()
        add, policy, on_ingestion_hour = sums.add_message, self._policy, self._on_ingestion_hour
        rejected: list[Rejected] = []
        for message in messages:
            rejected += add(
                message.data or b"",
                message.attributes,
                message.publish_time.micros / 1_000_000,
                policy,
                on_ingestion_hour,
            )
        return rejected

    def _count_ingestion_hour(self, reason: str) -> None:
        self._ingestion_hour[reason] += 1

    def finish_bundle(self):
        Metrics.counter("ParseVotes", "messages").inc(self._messages)
        Metrics.counter("ParseVotes", "accepted").inc(self._sums.votes + sum(p.votes for p in self._pulls.values()))
        for reason, count in self._rejected.items():
            Metrics.counter("ParseVotes", f"rejected_{reason}").inc(count)
        for reason, count in self._ingestion_hour.items():
            Metrics.counter("ParseVotes", f"ingestion_hour_{reason}").inc(count)
        now = time.time()
        stamped = [(Timestamp(micros=stamp_us), sums) for stamp_us, sums in self._pulls.items()]
        if self._sums.latest_publish_s > float("-inf"):  # messages as elements of their own (Dataflow)
            stamped.append((ingestion_time(now, self._sums.latest_publish_s), self._sums))
        ahead = sum(sums.votes for at, sums in stamped if float(at) - now > CLOCK_BEHIND_COUNTED_S)
        if ahead:
            Metrics.counter("ParseVotes", "stamped_ahead_of_worker_clock").inc(ahead)
        for at, sums in stamped:
            yield from sums.emit(at)
            for states in sums.emit_states(at):
                yield beam.pvalue.TaggedOutput(self.STATES, states)


class ParseVotes(beam.PTransform):
    """PubsubMessage -> ParsedVotes(sums: (shard, ShardSums), states: (shard, ShardVotes), rejected: Rejected).

    A message is one event, or a batch of them (contract v2). An element may also be a list of
    messages: the local reader's whole pull (transforms/read_votes.py), each message with
    its publish time in `publish_time`. `sums` holds each bundle's
    accepted delta events summed per post and event hour, `states` its vote-state events merged
    to the latest per post and user, both stamped with the bundle's ingestion time (what
    WindowAndSumVotes and WindowAndMergeVoteStates window by). The element timestamp (the Pub/Sub
    publish time, unless the read names a timestamp attribute) stands in for a missing event_time,
    and for one outside the event-time policy (older than the delta retention, or further ahead than
    the clock skew it allows): such a vote is counted in its ingestion hour, never dropped.
    Metrics: ParseVotes/messages, ParseVotes/accepted (votes), ParseVotes/rejected_<reason> (dead letters: one per
    rejected line of a batch, or one per message rejected whole) and
    ParseVotes/ingestion_hour_<reason> (older_than_retention, ahead_of_clock) and
    ParseVotes/stamped_ahead_of_worker_clock (votes of bundles whose worker clock was behind their
    messages' publish times: stamped at the publish time, see the module docstring).
    """

    def __init__(self, policy: EventTimePolicy = DEFAULT_EVENT_TIME_POLICY) -> None:
        super().__init__()
        self._policy = policy

    def expand(self, messages: beam.PCollection) -> ParsedVotes:
        parsed = messages | "Parse" >> beam.ParDo(_ParseAndSumFn(self._policy)).with_outputs(
            _ParseAndSumFn.REJECTED, _ParseAndSumFn.STATES, main="sums"
        )
        return ParsedVotes(
            sums=parsed.sums, states=parsed[_ParseAndSumFn.STATES], rejected=parsed[_ParseAndSumFn.REJECTED]
        )
