"""The side of a ranking that no fold has reached yet, read the same way by every fresh ranking, and
what a read does when the bounds it reads there leave its answer uncertified.

Every fresh ranking (spanner_reads/rankings/: the all-time top, the hot score and the last N
hours) reads, in its one snapshot, the fold cursor C, the posts that cursor's run skipped, and
every TopCandidates row committed after C (`read_fresh_side`). Each row
lists the biggest risers of its commit and bounds what that commit raised any other post by (its
Threshold in upvotes, its RiseThreshold for the trending rankings). A post the read does not
consider gained at most the sum of those bounds since C, so the answer is certified when its K-th
beats the folded side's bound plus that sum.

Reading what decides it (`Resolver`). When that sum keeps the K-th from being certified, the read
does not give up: it reads the DeltaCommits rows of the commits whose bounds stand in the way
(keyed like their candidate rows: a point read each), which list every post of their commit. Those
posts are then considered like the others (their exact counts read in the same snapshot), and the
commits' bounds leave the sum: a post still not considered had no delta in a commit read, so it
gained nothing there, and at most the bound of every other commit, as before. The commits read are
the fewest whose bounds, largest first, bring the sum of the rest within what the K-th beats
(`commits_to_read`, pure). Adding posts can only raise the K-th, so one round usually certifies;
a read takes rounds until it is certified, nothing useful is left to read, or its budget is spent.

The budget, per read: the commits read add at most RESOLVE_POSTS posts to those considered, from at
most RESOLVE_COMMITS commit rows (a budget of 0 posts reads nothing: the bounds alone decide). A commit whose posts would pass the budget is not taken; past the
budget the answer says it is not certified, with the bound of the commits left (docs/reading.md).
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from datetime import datetime, timezone
from typing import NamedTuple

from spanner_reads.reads import last_fold_snapshot
from spanner_store.delta_commits import fold_cursor, posts_of_commits
from spanner_store.top_candidates import Candidates, CommitCandidates, candidates_since

# m: folded posts read beyond K, so that posts falling back can be replaced by the next ones.
DEFAULT_EXTRA = 20
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# What one read may add to resolve its bounds: posts whose exact counts it then reads, and the
# DeltaCommits rows it reads to find them.
RESOLVE_POSTS = 5_000
RESOLVE_COMMITS = 1_000


class FreshSide(NamedTuple):
    folded_through: datetime | None  # the newest finished fold's snapshot, None if never folded
    candidates: Candidates  # every candidate row committed after the cursor
    skipped: list[str]  # the cursor run's skipped posts: considered whatever the rows say


def read_fresh_side(snapshot) -> FreshSide:
    """The fold cursor's view in `snapshot`: the posts it skipped and every candidate row after it.
    No cursor: a database never folded, or whose folds predate the change log (each of those
    scanned every post), is read from its newest fold, or from the start."""
    folded_through = last_fold_snapshot(snapshot)
    cursor = fold_cursor(snapshot)
    since = cursor.changes_through if cursor else folded_through or EPOCH
    skipped = sorted(post.post_id for post in cursor.skipped) if cursor else []
    return FreshSide(folded_through, candidates_since(snapshot, since), skipped)


def commits_to_read(bounds: Iterable[tuple[str, float]], room: float, strict: bool) -> list[str]:
    """The fewest commits whose bounds must leave a sum for the rest to stay within `room` (below
    it when `strict`): the largest bounds, largest first. An infinite bound (a row that bounds
    nothing) is always among them; a `room` below 0 takes every one. Pure."""
    ordered = sorted(bounds, key=lambda item: item[1])
    kept = 0.0
    for taken, (_, bound) in enumerate(ordered):
        total = kept + bound
        if not (total < room or (not strict and total == room)):
            return [commit_id for commit_id, _ in reversed(ordered[taken:])]
        kept = total
    return []


class Resolver:
    """The commits one read has read to resolve its bounds (see the module docstring), within its
    budget. `open_commits` are the candidate rows whose bounds still count."""

    def __init__(
        self, snapshot, candidates: Candidates, max_posts: int = RESOLVE_POSTS, max_commits: int = RESOLVE_COMMITS
    ) -> None:
        self._snapshot = snapshot
        self._open = {commit.commit_id: commit for commit in candidates.commits}
        self._tried: set[str] = set()
        self._posts_left = max_posts
        self._commits_left = max_commits if max_posts > 0 else 0  # no budget: read nothing (as before issue 44)
        self.commits_read = 0  # commits whose every post the read considers

    @property
    def open_commits(self) -> list[CommitCandidates]:
        return list(self._open.values())

    def spend(self, posts: int) -> bool:
        """Takes `posts` more posts out of the budget, if it has them (a read widening its folded
        side when that side is what stands in the way)."""
        if posts > self._posts_left:
            return False
        self._posts_left -= posts
        return True

    def read(self, commit_ids: Iterable[str], considered: Container[str]) -> list[str] | None:
        """Reads the posts of these commits (the most important first), as many commits as the
        budget takes, and returns their posts not in `considered`; their bounds no longer count.
        None when no commit could be read (every one tried before, or past the budget)."""
        wanted = [self._open[c] for c in commit_ids if c in self._open and c not in self._tried]
        wanted = wanted[: self._commits_left]
        if not wanted:
            return None
        self._tried.update(commit.commit_id for commit in wanted)
        self._commits_left -= len(wanted)
        found = posts_of_commits(self._snapshot, ((c.shard, c.committed_at, c.commit_id) for c in wanted))
        added: dict[str, None] = {}
        resolved = 0
        for commit in wanted:
            posts = found.get(commit.commit_id)
            new = [] if posts is None else [p for p in posts if p not in considered and p not in added]
            if posts is None or len(new) > self._posts_left:
                continue  # no row to read, or past the budget: its bound stays
            added.update(dict.fromkeys(new))
            self._posts_left -= len(new)
            del self._open[commit.commit_id]
            resolved += 1
        self.commits_read += resolved
        return list(added) if resolved else None
