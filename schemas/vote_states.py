"""One vote per user: what a vote-state event means, as pure rules.

A vote-state event says where one user stands on one post: "up", "down" or "none" (no vote,
or a vote taken back). Only the user's latest state counts: a post's upvotes include one per
user whose latest state is "up", its downvotes one per user whose latest state is "down"
(schemas/counters.py says which counter counts which state).

"Latest" is the highest `VoteOrder`: the event time (to the microsecond, after the clock-skew
policy of schemas/contract.py), then the event_id, then the vote itself. It is a total order
over distinct events, so the winner never depends on the order events arrive in: a duplicate,
a redelivery, an older event arriving late or the same state sent again changes nothing,
and two copies of a user's events merged in any grouping end at the same state (`later` is
associative and commutative).

Counting follows from it. A user's stored state moves only forward in that order, and each
move takes the old state's count out (`counted(old).negated()`, in the old state's event hour)
and puts the new one's in (`counted(new)`, in its hour). Summed over every move, the counts
equal the number of users in each latest state, in total and per event hour, whatever the
arrival order (tests/test_vote_states.py holds that as a property over random orders,
duplicates and flips).

Suspensions (issue 46, `upvotes suspend-users`): a state an active suspension of its user covers
(`held`: an active `Hold` whose `since_us` is at or before the state's time, or that has none)
counts nothing once the suspension's passes have moved it out. A stored state contributes
`counted(vote)`, or nothing when it is held out (`contributed`): by its own mark (a state stored
while its user was suspended, or moved out on its own), or by an `applied` hold of its user (the
suspension's pass moved the user's whole history out at once and marked the hold, not each vote).
Every move takes out what the old state contributes and puts in what the new one does, so once the
passes are done the counts are the users in each latest state that no active suspension covers.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, MutableMapping
from typing import NamedTuple, TypeVar

from schemas.counters import COUNTER_OF_VOTE, Counts

NONE = "none"
UP = "up"
DOWN = "down"
# Every value a vote-state event may carry: "none" and each counter's vote (schemas/counters.py).
VOTES: tuple[str, ...] = (NONE, *COUNTER_OF_VOTE)
# The last tie-breaker of two events with the same time and event_id (the same event sent with
# two different votes, a publisher's bug): a fixed rank, so that the winner is still the same
# in every arrival order.
_RANK = {vote: rank for rank, vote in enumerate(VOTES)}


class VoteOrder(NamedTuple):
    """Where an event stands among a user's events on one post; the highest is the latest."""

    at_us: int  # the event time, microseconds since the epoch (UTC)
    event_id: str  # "" when the event has none
    rank: int  # the vote's rank in VOTES


def order_of(vote: str, at_us: int, event_id: str) -> VoteOrder:
    return VoteOrder(at_us, event_id, _RANK[vote])


class LatestVote(NamedTuple):
    """The latest of some vote-state events of one user on one post, and what it stands for:
    how many events were merged into it (the others were older, or the same), and whether any of
    them was a vote (up or down: the user is one of the post's unique voters)."""

    vote: str  # one of VOTES
    at_us: int
    event_id: str
    event_hour: int  # start of the latest event's hour (epoch seconds): where its change is counted
    events: int = 1
    voted: bool = False

    @property
    def order(self) -> VoteOrder:
        return order_of(self.vote, self.at_us, self.event_id)


def later(a: LatestVote, b: LatestVote) -> LatestVote:
    """The later of two, standing for the events of both."""
    winner = a if a.order >= b.order else b
    return winner._replace(events=a.events + b.events, voted=a.voted or b.voted)


_Key = TypeVar("_Key", bound=Hashable)


def keep_latest(latest: MutableMapping[_Key, LatestVote], key: _Key, state: LatestVote) -> None:
    """Merges `state` into `latest[key]`: the later of the two, standing for both."""
    found = latest.get(key)
    latest[key] = state if found is None else later(found, state)


class Erasure(NamedTuple):
    """An erasure request's floor on one user's votes (`upvotes forget-user`): every state of the
    user at or before it counts nothing, on every post, the posts with no stored state included.
    It stands where the request's own "none" states stand in the order (order_of(NONE, at_us,
    event_id)), so a retraction of the request equals it and a state cast after it is later."""

    at_us: int  # the forget time, microseconds since the epoch
    event_id: str  # the request's "@forget/<ID>"
    event_hour: int  # the forget time's hour (epoch seconds), where its "none" states are counted

    @property
    def order(self) -> VoteOrder:
        return order_of(NONE, self.at_us, self.event_id)


def erased(state: LatestVote, erasure: Erasure | None) -> LatestVote:
    """`state` as the user's erasure leaves it: itself when later than the erasure (or with none),
    else the erasure's own "none", counted in the forget time's hour, standing for the same events
    (they were delivered, they just count nothing). So an event of a forgotten user that arrives
    late (from a window, a backlog or a replay) writes what the request would have written on that
    post, whether or not the user had a stored vote there, and moves a stored vote out if the
    request has not reached it yet.

    Nor does it make the user a unique voter: a state no later than the erasure is the latest of
    the events it stands for, so every one of them is at or before the forget time, forgotten
    (`voted` False). A state later than the erasure keeps its `voted`: it may come from one of its
    events after the forget time, which a merged state cannot tell apart from one before it. Pure."""
    if erasure is None or state.order > erasure.order:
        return state
    return LatestVote(NONE, erasure.at_us, erasure.event_id, erasure.event_hour, state.events, False)


def counted(vote: str | None) -> Counts:
    """What one user in this state adds to the counts: one on its vote's counter (None: never voted)."""
    return Counts(**{COUNTER_OF_VOTE[vote]: 1}) if vote in COUNTER_OF_VOTE else Counts()


class Hold(NamedTuple):
    """An active suspension of one user (`upvotes suspend-users`, issue 46): while it holds, every
    stored vote of the user cast at or after `since_us` (every vote: None) counts nothing. `applied`:
    a pass moved every vote it covers out of the counts at once, so those votes count nothing
    whatever their own marks say (upvotes/operations/suspension_passes.py)."""

    suspension_id: str
    since_us: int | None  # microseconds since the epoch; None: every vote of the user, ever
    applied: bool = False


def covered(at_us: int, holds: Iterable[Hold]) -> bool:
    """Whether one of a user's active suspensions covers a state of the user cast at `at_us`. Pure."""
    return any(hold.since_us is None or hold.since_us <= at_us for hold in holds)


def held(vote: str, at_us: int, holds: Iterable[Hold]) -> bool:
    """Whether a user's state (`vote`, cast at `at_us`) is held out of the counts by one of the
    user's active suspensions. "none" counts nothing either way, so it is never held. Pure."""
    return vote != NONE and covered(at_us, holds)


def contributed(vote: str | None, is_held: bool) -> Counts:
    """What a user's stored state adds to the counts: `counted(vote)`, or nothing while held out."""
    return Counts() if is_held else counted(vote)


def held_out(vote: str, at_us: int, marked: bool, holds: Iterable[Hold]) -> bool:
    """Whether a stored state (`vote`, cast at `at_us`, its HeldOut mark `marked`) is out of the
    counts now: marked, or covered by one of its user's applied holds. Pure."""
    return marked or held(vote, at_us, [hold for hold in holds if hold.applied])
