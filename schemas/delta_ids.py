"""A delta's identity: every spelling of a DeltaId, and of the grouping key that names a pane's
shard count. One owner, since idempotence rests on these strings: a retried or replayed write
spells the same key and finds it written, and two different writes never share one.

The PostDeltas key is (post, event hour, DeltaId); the DeltaId says who wrote the row and which
write it was:

- a streaming pane: `writer:window start:pane:window end:shard count` (`pane_delta_id`), the
  writer being the job's name and launch generation (`writer_identity`). Generations claimed
  before the second format existed keep the first, `writer:window start:pane` (FIRST_KEY_FORMAT),
  so an in-place update never re-spells a key already written; both stay writable and readable.
  The pane's shard count travels in its elements' grouping key (`sum_shard`, `shards_of_key`);
- a vote-state transaction: `@vote/<commit id>` (`vote_delta_id`), made exact by the stored state
  read in the transaction, not by the key;
- a moderation adjustment: `@adjust/<adjustment ID>` (`adjustment_delta_id`), and each later
  commit of a reset split in several: `@adjust/<adjustment ID>/<part>` (`reset_part_delta_id`;
  an adjustment ID holds no '/', so it never equals another adjustment's);
- a corrected dead letter: `@replay/<dead letter identity>` (`replay_delta_id`);
- a suspension's or a restore's pass (issue 46): `@suspension/<commit id>` (`suspension_delta_id`),
  made exact, like a vote-state transaction's, by the HeldOut marks read in the transaction.

'@' is in no Dataflow job name nor writer identity, so the last four never equal a pane's. An
erasure request's "none" states carry the event_id `@forget/<request ID>` (`forget_event_id`).
"""

from __future__ import annotations

from schemas import post_hash

# How a generation spells its panes' DeltaIds (spanner_writes/writers.py records it per
# generation). The first format, writer:window start:pane, let two panes share a key when an
# in-place update changed the window length or the shard count (an old [T, T+10 s) pane and a
# new [T, T+20 s) one), and the second was then taken as already written: its votes lost. The
# second format adds the window's end and the shard count.
FIRST_KEY_FORMAT = 1
KEY_FORMAT = 2

# Enough keys to spread the window combine over a few dozen Dataflow workers; few enough that a
# bundle's elements and a runner's per-key work stay small (transforms/parse_and_sum.py).
SUM_SHARDS = 32
# The shard count of every job before the count was part of the grouping key: its keys are the
# bare shard numbers, so an update from such a job keeps grouping with its open windows.
FIRST_SUM_SHARDS = 32
_SHARDS_KEY_BASE = 1 << 20  # a grouping key is shards * base + shard, for any other count


def writer_identity(writer_name: str, generation: int) -> str:
    """The writer part of a pane's DeltaId: the name and the generation of its launch. Generation
    0 is the bare name, the identity jobs had before generations existed, so the first in-place
    update of such a job keeps its keys."""
    return writer_name if generation == 0 else f"{writer_name}#g{generation}"


def pane_delta_id(
    writer: str, window_start_us: int, pane_index: int, window_end_us: int, shards: int, key_format: int = KEY_FORMAT
) -> str:
    """The deterministic identity of one pane's delta: same pane, same ID, on any retry; two
    different panes, different IDs, whatever an update changed (transforms/windowing.py)."""
    if key_format == FIRST_KEY_FORMAT:
        return f"{writer}:{window_start_us}:{pane_index}"
    return f"{writer}:{window_start_us}:{pane_index}:{window_end_us}:{shards}"


def pane_window_end_us(delta_id: str) -> int | None:
    """The window end of a streaming pane's DeltaId of the current format (`pane_delta_id`); None
    for any other DeltaId (first format, vote state, adjustment, replay)."""
    if delta_id.startswith("@"):
        return None
    parts = delta_id.rsplit(":", 4)
    if len(parts) != 5 or not all(part.isdigit() for part in parts[1:]):
        return None
    return int(parts[3])


def vote_delta_id(commit_id: str) -> str:
    """The DeltaId of the delta rows one vote-state commit writes."""
    return f"@vote/{commit_id}"


def suspension_delta_id(commit_id: str) -> str:
    """The DeltaId of the delta rows one pass of a suspension or a restore writes
    (upvotes/operations/suspension_passes.py): the stored votes it moves out of the counts, or back in."""
    return f"@suspension/{commit_id}"


def adjustment_delta_id(adjustment_id: str) -> str:
    """The DeltaId of a moderation adjustment's compensating delta rows (one per event hour)."""
    return f"@adjust/{adjustment_id}"


def reset_part_delta_id(adjustment_id: str, part: int) -> str:
    """The DeltaId of the rows of a split reset's commit number `part` (2 and on; the first is
    adjustment_delta_id's): the same in every run of the reset, so a rerun's collides."""
    return f"@adjust/{adjustment_id}/{part}"


def replay_delta_id(identity: str) -> str:
    """The DeltaId of the delta row a corrected rejected vote becomes (`upvotes dead-letters
    replay`), from the rejected line's identity: a replay run again, or after a crash before its
    acknowledgement, writes the same key and finds it written."""
    return f"@replay/{identity}"


def forget_event_id(request_id: str) -> str:
    """The event_id of an erasure request's "none" states: the same in every run of the request, so
    a rerun's state equals the first run's and is superseded by it, never applied twice."""
    return f"@forget/{request_id}"


def shard_key(shard: int, shards: int) -> int:
    """The grouping key of one shard of a pane's sums, carrying the shard count."""
    return shard if shards == FIRST_SUM_SHARDS else shards * _SHARDS_KEY_BASE + shard


def sum_shard(post_id: str, shards: int = SUM_SHARDS) -> int:
    """The grouping key of a post's sums: stable across processes, workers and runs, and
    carrying the shard count it was computed with (`shards_of_key`)."""
    return shard_key(post_hash(post_id) % shards, shards)


def shards_of_key(key: int) -> int:
    """The shard count a grouping key was computed with."""
    return FIRST_SUM_SHARDS if key < _SHARDS_KEY_BASE else key // _SHARDS_KEY_BASE
