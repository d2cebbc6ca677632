"""The ledger: the exact totals a correct pipeline must reach for the valid events published.

Per post and per post and event hour, saved as JSON for `upvotes verify` and the tests, with
each post's exact number of distinct voters (user IDs with an upvote, schemas/voter_sketch.py).
"""
from __future__ import annotations

import json
import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from schemas.contract import DEFAULT_EVENT_TIME_POLICY, event_hour
from schemas.counters import NAME_OF, NAMES, VOTER_CONTRACT_NAMES
from schemas.records import VoteEvent


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

    def add(self, event: dict[str, Any]) -> None:
        """Counts one valid event dict; like the pipeline (with its default event-time policy), it
        buckets a missing or out-of-bounds event_time by the time now."""
        self._count(event["post_id"], event["counter"], event["delta"],
                    event_hour(event.get("event_time"), time.time(), DEFAULT_EVENT_TIME_POLICY), event.get("user_id"))

    def add_vote(self, vote: VoteEvent) -> None:
        self._count(vote.post_id, vote.counter, vote.delta, vote.event_hour, vote.user_id)

    def add_invalid(self, n: int = 1) -> None:
        self.invalid += n

    def _count(self, post_id: str, counter: str, delta: int, hour_s: int, user_id: str | None) -> None:
        if counter in VOTER_CONTRACT_NAMES and delta > 0 and user_id is not None:
            self._voters.setdefault(post_id, set()).add(user_id)
        name = NAME_OF[counter]
        self.events += 1
        _sums(self._posts, post_id)[name] += delta
        _sums(self._hourly.setdefault(post_id, {}), hour_s)[name] += delta

    @property
    def totals(self) -> dict[str, dict[str, int]]:
        """{post_id: {counter name: n}} for every post with a valid event, net 0 included."""
        return {post: dict(sums) for post, sums in self._posts.items()}

    @property
    def unique_voters(self) -> dict[str, int]:
        """{post_id: distinct user IDs with an upvote}, for every post with a valid event. A saved
        ledger keeps these counts, not the IDs: a loaded ledger reports the saved counts."""
        return {post: len(self._voters.get(post, ())) for post in self._posts} | self._loaded_unique

    def hourly(self) -> dict[str, dict[str, dict[str, int]]]:
        """{post_id: {"2026-11-22T01:00:00Z": {counter name: n}}}, by event hour."""
        return {
            post: {_hour_text(hour): dict(sums) for hour, sums in sorted(hours.items())}
            for post, hours in self._hourly.items()
        }

    def save(self, path: str | os.PathLike[str]) -> None:
        document = {"events": self.events, "invalid": self.invalid, "posts": self.totals, "hourly": self.hourly(),
                    "unique_voters": self.unique_voters}
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
