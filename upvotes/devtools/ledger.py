"""The ledger: the exact totals a correct pipeline must reach for the valid events published.

Per post and per post and event hour, saved as JSON for `upvotes verify` and the tests, with
each post's exact number of distinct voters (user IDs with an upvote, or an up or down vote
state: schemas/voter_sketch.py). Delta events add up; of vote-state events only each user's latest
per post counts (schemas/vote_states.py), so the ledger keeps that latest state, whatever order
the events were added in.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from schemas.contract import DEFAULT_EVENT_TIME_POLICY, VOTE_FIELD, event_hour, vote_time
from schemas.counters import NAME_OF, NAMES, VOTER_CONTRACT_NAMES
from schemas.records import PostUser, VoteEvent, VoteState
from schemas.vote_states import NONE, VoteOrder, counted, order_of


def _hour_text(hour_s: int) -> str:
    return time.strftime("%Y-%m-%dT%H:00:00Z", time.gmtime(hour_s))


def _hour_seconds(hour_text: str) -> int:
    return int(datetime.fromisoformat(hour_text).timestamp())


def _sums(sums_by_key: dict, key) -> dict[str, int]:
    found = sums_by_key.get(key)
    if found is None:
        found = sums_by_key[key] = dict.fromkeys(NAMES, 0)
    return found


def _counts(saved: dict[str, int]) -> dict[str, int]:
    """A saved ledger's sums; a counter it does not name (one added since it was written) is 0."""
    return {name: saved.get(name, 0) for name in NAMES}


class Ledger:
    """The exact totals that a correct pipeline reaches for the valid events published."""

    def __init__(self) -> None:
        self.events = 0
        self.invalid = 0
        self._posts: dict[str, dict[str, int]] = {}  # post -> {counter name: sum}
        self._hourly: dict[str, dict[int, dict[str, int]]] = {}  # post -> hour (epoch s) -> {counter name: sum}
        self._voters: dict[str, set[str]] = {}  # post -> user IDs of its voters (schemas/voter_sketch.py)
        self._loaded_unique: dict[str, int] = {}  # distinct voters per post, from a saved ledger
        self._states: dict[PostUser, tuple[VoteOrder, int, str]] = {}  # each user's latest state: order, hour, vote

    def add(self, event: dict[str, Any]) -> None:
        """Counts one valid event dict; like the pipeline (with its default event-time policy), it
        buckets a missing or out-of-bounds event_time by the time now."""
        if VOTE_FIELD in event:
            hour, at_us = vote_time(event["event_time"], time.time(), DEFAULT_EVENT_TIME_POLICY)
            self.add_vote(
                VoteState(event["post_id"], event["user_id"], event[VOTE_FIELD], at_us, hour, event.get("event_id"))
            )
            return
        self._count(
            event["post_id"],
            event["counter"],
            event["delta"],
            event_hour(event.get("event_time"), time.time(), DEFAULT_EVENT_TIME_POLICY),
            event.get("user_id"),
        )

    def add_vote(self, vote: VoteEvent | VoteState) -> None:
        if isinstance(vote, VoteState):
            self._keep_state(vote)
        else:
            self._count(vote.post_id, vote.counter, vote.delta, vote.event_hour, vote.user_id)

    def _keep_state(self, state: VoteState) -> None:
        self.events += 1
        _sums(self._posts, state.post_id)  # the post is counted, even if every state ends at none
        if state.vote != NONE:
            self._voters.setdefault(state.post_id, set()).add(state.user_id)
        key = PostUser(state.post_id, state.user_id)
        candidate = (order_of(state.vote, state.at_us, state.event_id or ""), state.event_hour, state.vote)
        self._states[key] = max(self._states.get(key, candidate), candidate)

    def add_invalid(self, n: int = 1) -> None:
        self.invalid += n

    def _count(self, post_id: str, counter: str, delta: int, hour_s: int, user_id: str | None) -> None:
        if counter in VOTER_CONTRACT_NAMES and delta > 0 and user_id is not None:
            self._voters.setdefault(post_id, set()).add(user_id)
        name = NAME_OF[counter]
        self.events += 1
        _sums(self._posts, post_id)[name] += delta
        _sums(self._hourly.setdefault(post_id, {}), hour_s)[name] += delta

    def _latest_states(self):
        """(post, event hour, what its user adds to the counts) of each user's latest state."""
        for key, (_, hour, vote) in self._states.items():
            yield key.post_id, hour, counted(vote)

    @property
    def totals(self) -> dict[str, dict[str, int]]:
        """{post_id: {counter name: n}} for every post with a valid event, net 0 included."""
        totals = {post: dict(sums) for post, sums in self._posts.items()}
        for post, _, counts in self._latest_states():
            for name, value in counts._asdict().items():
                totals[post][name] += value
        return totals

    @property
    def unique_voters(self) -> dict[str, int]:
        """{post_id: distinct user IDs with an upvote}, for every post with a valid event. A saved
        ledger keeps these counts, not the IDs: a loaded ledger reports the saved counts."""
        return {post: len(self._voters.get(post, ())) for post in self._posts} | self._loaded_unique

    def hourly(self) -> dict[str, dict[str, dict[str, int]]]:
        """{post_id: {"2026-11-22T01:00:00Z": {counter name: n}}}, by event hour (a user's vote state in
        the hour of their latest state)."""
        hourly = {post: {hour: dict(sums) for hour, sums in hours.items()} for post, hours in self._hourly.items()}
        for post, hour, counts in self._latest_states():
            sums = _sums(hourly.setdefault(post, {}), hour)
            for name, value in counts._asdict().items():
                sums[name] += value
        return {
            post: {_hour_text(hour): sums for hour, sums in sorted(hours.items())} for post, hours in hourly.items()
        }

    def save(self, path: str | os.PathLike[str]) -> None:
        document = {
            "events": self.events,
            "invalid": self.invalid,
            "posts": self.totals,
            "hourly": self.hourly(),
            "unique_voters": self.unique_voters,
        }
        Path(path).write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Ledger:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
        ledger = cls()
        ledger.events, ledger.invalid = document["events"], document["invalid"]
        ledger._posts = {post: _counts(sums) for post, sums in document["posts"].items()}
        ledger._hourly = {
            post: {_hour_seconds(hour): _counts(sums) for hour, sums in hours.items()}
            for post, hours in document["hourly"].items()
        }
        ledger._loaded_unique = document.get("unique_voters", {})  # absent: a ledger from before voters
        return ledger
