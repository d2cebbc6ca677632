"""Finding voting rings and serial voters in votes (issue 46): the pure detection behind
`upvotes suspects` (the Spanner read is spanner_reads/recent_votes.py; the command only reports,
a person or a policy decides, with `upvotes suspend-users`).

Two kinds of suspect:

- **lockstep** (Facebook's CopyCatch, WWW 2013): at least `min_users` users who all voted the same
  way on the same `min_posts` posts, each post's votes of the group within `within_s` of each
  other. Honest users vote on the same posts too, popular ones in crowds; what a ring adds is the
  same group, again and again, at the same moments. So:

  1. each vote becomes tokens (post, vote, time bin) on two grids of bins 2 x `within_s` wide,
     offset by `within_s`: votes within `within_s` of each other always share a bin of one grid
     (an interval shorter than `within_s` holds at most one bin boundary of the two grids), and
     votes up to twice that apart may;
  2. a token supports a group when it holds at least `min_users` of the group's users, at least
     `min_cohesion` of the group (the group voted there together: two rings that met on one post
     are not one group) and at least `min_share` of every voter the token had (a crowd of
     thousands voting a viral post in the same minute supports no group: a handful of its voters
     in common is no evidence, and a ring that is a small share of a crowd moves little);
  3. peeling (a bipartite core, linear in the tokens): a token left with fewer users than it needs
     cannot support a group, a user with fewer than `min_posts` posts among the tokens left cannot
     be in one; repeated until nothing more goes. Sound (a group's users and tokens survive it
     whatever else goes), and most honest users and tokens go here;
  4. refinement from each token left as a seed, smallest first (CopyCatch's alternating step): the
     group starts as the seed's users; its supporting tokens are found, then the group becomes
     every user with at least `min_posts` posts among them (so it may grow: a seed on one grid may
     hold part of a ring whose votes on that post straddle its bins); repeated until stable. A
     group of at least `min_users` users is kept and its tokens are not seeds again; groups sharing
     half their users (parts of one ring grown from different seeds) are merged;
  5. score: the group's votes cast in lockstep (user, post pairs on supporting tokens); the
     evidence window is the first and last of those votes.

- **serial**: one user with at least `serial_votes` votes within `serial_within_s` (any window of
  that length, sliding): a script, or a person doing nothing else. Score: the votes in the densest
  such window, which is the evidence window.

Defaults (`Rules`): 10 users on 5 posts within 15 minutes, holding half the group and a quarter
of a token's voters; 100 votes within 10 minutes. Rings of the issue are 20-200 users on 10-50
posts, so a group of 10 on 5 leaves room for a ring split by its own timing; 15 minutes covers a
script or a chat-coordinated ring; a quarter of a post's voters in one window is what makes a ring
matter to that post's count. A human reading a feed rarely votes 10 times a minute for 10 minutes.
bench/suspensions.py measures precision and recall on ring members with these defaults (honest
users with heavy-tailed activity over Zipf-popular posts, the 50 most popular voted by crowds in
the same minute). Lower them to catch smaller rings at the price of more honest users flagged.

Cost: building the tokens and peeling are linear in the votes; a seed's refinement counts the
tokens of its users that could support a group of its size, so the whole costs about the sum over
the users left after peeling of their tokens squared (the users who vote on many crowded posts).
Everything is in memory: a few hundred bytes per vote.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from spanner_reads.recent_votes import CastVote

LOCKSTEP = "lockstep"
SERIAL = "serial"


@dataclass(frozen=True)
class Rules:
    """The detector's thresholds (see the module docstring for the defaults' reasons)."""

    min_users: int = 10  # m: users of a lockstep group
    min_posts: int = 5  # n: posts each of them voted on with the group
    within_s: float = 900.0  # Δt: how close in time a group's votes on one post are
    min_share: float = 0.25  # of a token's voters the group must hold for it to count as evidence
    min_cohesion: float = 0.5  # of the group a token must hold (the group voted on it together)
    serial_votes: int = 100  # a user's votes ...
    serial_within_s: float = 600.0  # ... within this long is a serial voter
    max_refinements: int = 20  # alternating steps per seed before giving up on it

    def __post_init__(self) -> None:
        if self.min_users < 2 or self.min_posts < 1 or self.serial_votes < 2:
            raise ValueError("a group needs at least 2 users and 1 post; a serial voter at least 2 votes")
        if not (
            self.within_s > 0 and self.serial_within_s > 0 and 0 <= self.min_share <= 1 and 0 <= self.min_cohesion <= 1
        ):
            raise ValueError("windows must be positive, min_share and min_cohesion within [0, 1]")


class Suspect(NamedTuple):
    """A group (or one user) worth a person's look, with its evidence."""

    kind: str  # LOCKSTEP or SERIAL
    users: tuple[str, ...]
    posts: tuple[str, ...]
    score: int  # the votes of the evidence: lockstep votes of the group, or the serial voter's densest window
    first_us: int  # the evidence window
    last_us: int

    def to_json(self, micros_to_text) -> dict:
        return {
            "kind": self.kind,
            "users": list(self.users),
            "posts": list(self.posts),
            "score": self.score,
            "window": {"start": micros_to_text(self.first_us), "end": micros_to_text(self.last_us)},
            "user_count": len(self.users),
            "post_count": len(self.posts),
        }


Token = tuple[str, str, int, int]  # (post, vote, grid, bin)


def _tokens(vote: CastVote, within_us: int) -> tuple[Token, Token]:
    width = 2 * within_us
    return (
        (vote.post_id, vote.vote, 0, vote.at_us // width),
        (vote.post_id, vote.vote, 1, (vote.at_us + within_us) // width),
    )


class _Graph:
    """Users and tokens as small integers, each with the other side's members; each token's item
    (post, vote) and how many users of a group it needs to support it."""

    def __init__(self, votes: list[CastVote], rules: Rules) -> None:
        within_us = round(rules.within_s * 1_000_000)
        token_ids: dict[Token, int] = {}
        user_ids: dict[str, int] = {}
        item_ids: dict[tuple[str, str], int] = {}
        self.tokens: list[Token] = []
        self.users: list[str] = []
        self.item_of: list[int] = []  # token -> item
        self.users_of: list[set[int]] = []  # token -> users
        self.tokens_of: list[set[int]] = []  # user -> tokens
        self.times: dict[tuple[int, int], int] = {}  # (user, token) -> the vote's time
        for vote in votes:
            user = user_ids.get(vote.user_id)
            if user is None:
                user = user_ids[vote.user_id] = len(self.users)
                self.users.append(vote.user_id)
                self.tokens_of.append(set())
            for token in _tokens(vote, within_us):
                tid = token_ids.get(token)
                if tid is None:
                    tid = token_ids[token] = len(self.tokens)
                    self.tokens.append(token)
                    self.item_of.append(item_ids.setdefault(token[:2], len(item_ids)))
                    self.users_of.append(set())
                self.users_of[tid].add(user)
                self.tokens_of[user].add(tid)
                self.times[(user, tid)] = vote.at_us
        # A token supports a group holding at least this many of its users: min_users, and
        # min_share of every voter it had (peeled or not); min_cohesion is checked per group.
        self.needed = [max(rules.min_users, rules.min_share * len(users)) for users in self.users_of]
        self.alive = [True] * len(self.tokens)
        self.by_need: list[list[int]] = []
        self.needs: list[list[float]] = []

    def peel(self, rules: Rules) -> None:
        """Drops tokens left with fewer users than they need and users with fewer than min_posts
        items among their tokens left, until neither is left (see the module docstring)."""
        min_posts, item_of, needed = rules.min_posts, self.item_of, self.needed
        items_of = [Counter(item_of[t] for t in tokens) for tokens in self.tokens_of]
        tokens = [t for t, users in enumerate(self.users_of) if len(users) < needed[t]]
        users = [u for u, items in enumerate(items_of) if len(items) < min_posts]
        user_alive = [True] * len(self.users)
        while tokens or users:
            while tokens:
                token = tokens.pop()
                if not self.alive[token]:
                    continue
                self.alive[token] = False
                item = item_of[token]
                for user in self.users_of[token]:
                    if not user_alive[user]:
                        continue
                    self.tokens_of[user].discard(token)
                    items = items_of[user]
                    items[item] -= 1
                    if not items[item]:
                        del items[item]
                        if len(items) < min_posts:
                            users.append(user)
                self.users_of[token] = set()
            while users:
                user = users.pop()
                if not user_alive[user]:
                    continue
                user_alive[user] = False
                for token in self.tokens_of[user]:
                    members = self.users_of[token]
                    members.discard(user)
                    if self.alive[token] and len(members) < needed[token]:
                        tokens.append(token)
                self.tokens_of[user] = set()
        # Each user's tokens left, by how many of a group's users they need: a group of g users can
        # only be supported by tokens needing at most g, so a refinement counts no others.
        self.by_need = [sorted(tokens, key=needed.__getitem__) for tokens in self.tokens_of]
        self.needs = [[needed[t] for t in tokens] for tokens in self.by_need]

    def refine(self, seed: int, rules: Rules) -> tuple[set[int], set[int]] | None:
        """The group grown from one seed token and its supporting tokens (see the module
        docstring), or None."""
        group = set(self.users_of[seed])
        needed, item_of, tokens_of = self.needed, self.item_of, self.tokens_of
        for _ in range(rules.max_refinements):
            held: Counter[int] = Counter()
            size = len(group)
            for user in group:
                held.update(self.by_need[user][: bisect_right(self.needs[user], size)])
            cohesion = rules.min_cohesion * size
            support = {token for token, n in held.items() if n >= needed[token] and n >= cohesion}
            # Every user with enough posts among those tokens, in the group or not.
            voters = set().union(*(self.users_of[token] for token in support))
            kept = {
                user
                for user in voters
                if len({item_of[token] for token in tokens_of[user] & support}) >= rules.min_posts
            }
            if len(kept) < rules.min_users:
                return None
            if kept == group:
                return group, support
            group = kept
        return None

    def suspect(self, group: set[int], support: set[int]) -> Suspect:
        pairs = {
            (user, self.item_of[token]): self.times[(user, token)]
            for token in support
            for user in self.users_of[token] & group
        }
        return Suspect(
            LOCKSTEP,
            tuple(sorted(self.users[user] for user in group)),
            tuple(sorted({self.tokens[token][0] for token in support})),
            len(pairs),
            min(pairs.values()),
            max(pairs.values()),
        )


def _merged(groups: list[tuple[set[int], set[int]]]) -> list[tuple[set[int], set[int]]]:
    """Groups sharing at least half of the smaller one's users, merged (transitively): the seeds of
    one ring's posts on the other grid can grow parts of it again."""
    parent = list(range(len(groups)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, (users_i, _) in enumerate(groups):
        for j in range(i):
            users_j = groups[j][0]
            if len(users_i & users_j) * 2 >= min(len(users_i), len(users_j)):
                parent[root(i)] = root(j)
    merged: dict[int, tuple[set[int], set[int]]] = {}
    for i, (users, support) in enumerate(groups):
        kept_users, kept_support = merged.setdefault(root(i), (set(), set()))
        kept_users |= users
        kept_support |= support
    return list(merged.values())


def find_lockstep(votes: Iterable[CastVote], rules: Rules = Rules()) -> list[Suspect]:
    """The lockstep groups among `votes` (see the module docstring), highest score first. Pure."""
    graph = _Graph(list(votes), rules)
    graph.peel(rules)
    claimed: set[int] = set()
    groups = []
    seeds = [t for t in range(len(graph.tokens)) if graph.alive[t]]
    for seed in sorted(seeds, key=lambda t: (len(graph.users_of[t]), graph.tokens[t])):
        if seed in claimed:
            continue
        grown = graph.refine(seed, rules)
        if grown is not None:
            claimed |= grown[1]
            groups.append(grown)
    suspects = [graph.suspect(users, support) for users, support in _merged(groups)]
    return sorted(suspects, key=lambda s: (-s.score, s.users))


def find_serial(votes: Iterable[CastVote], rules: Rules = Rules()) -> list[Suspect]:
    """Users with at least rules.serial_votes votes within rules.serial_within_s, highest score
    first; each with the posts and the bounds of their densest window. Pure."""
    by_user: dict[str, list[CastVote]] = defaultdict(list)
    for vote in votes:
        by_user[vote.user_id].append(vote)
    within_us = round(rules.serial_within_s * 1_000_000)
    found = []
    for user, cast in by_user.items():
        if len(cast) < rules.serial_votes:
            continue
        cast.sort(key=lambda v: v.at_us)
        best, best_start, start = 0, 0, 0
        for end in range(len(cast)):
            while cast[end].at_us - cast[start].at_us > within_us:
                start += 1
            if end - start + 1 > best:
                best, best_start = end - start + 1, start
        if best >= rules.serial_votes:
            window = cast[best_start : best_start + best]
            found.append(
                Suspect(
                    SERIAL, (user,), tuple(sorted({v.post_id for v in window})), best, window[0].at_us, window[-1].at_us
                )
            )
    return sorted(found, key=lambda s: (-s.score, s.users))


def find_suspects(votes: Iterable[CastVote], rules: Rules = Rules()) -> list[Suspect]:
    """Both kinds, lockstep groups first. Pure."""
    votes = list(votes)
    return find_lockstep(votes, rules) + find_serial(votes, rules)
