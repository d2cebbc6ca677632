"""`upvotes suspects`: voting rings and serial voters among the votes of a recent window.

It reports, it never acts: a person or a policy decides, with `upvotes suspend-users`. The read is
spanner_reads/recent_votes.py (the change log since the window's start, then the Votes rows of the
users it names: its cost follows the votes of the window, not the catalogue); the detection is
pure, upvotes/operations/suspect_rules.py (what each kind means, the defaults and why).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import NamedTuple

from spanner_reads.recent_votes import DEFAULT_SKEW, RecentVotes, votes_since
from spanner_store.tables import micros_timestamp
from upvotes.operations.suspect_rules import Rules, Suspect, find_suspects


class SuspectReport(NamedTuple):
    suspects: list[Suspect]
    since: datetime
    read: RecentVotes
    read_s: float  # the Spanner read
    detect_s: float  # the detection, in memory

    def summary(self) -> dict:
        read = self.read
        return {
            "since": self.since.isoformat(),
            "as_of": read.as_of.isoformat(),
            "votes": len(read.votes),
            "users": read.users_read,
            "commits_read": read.commits_read,
            "votes_rows_read": read.votes_rows_read,
            "rows_read": read.rows_read,
            "read_s": round(self.read_s, 3),
            "detect_s": round(self.detect_s, 3),
            "groups": sum(s.kind != "serial" for s in self.suspects),
            "serial_voters": sum(s.kind == "serial" for s in self.suspects),
        }


def micros_text(at_us: int) -> str:
    return micros_timestamp(at_us).isoformat().replace("+00:00", "Z")


def find(
    database, window: timedelta, rules: Rules = Rules(), now: datetime | None = None, skew: timedelta = DEFAULT_SKEW
) -> SuspectReport:
    """The suspects among the counted votes cast in the last `window` (up to now)."""
    since = (now or datetime.now(timezone.utc)) - window
    started = time.monotonic()
    read = votes_since(database, since, skew)
    read_s = time.monotonic() - started
    started = time.monotonic()
    suspects = find_suspects(read.votes, rules)
    return SuspectReport(suspects, since, read, read_s, time.monotonic() - started)
