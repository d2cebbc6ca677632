"""Key sets of many keys or ranges, turned into their protobuf without the client's per-key copies.

Why: the client library's `KeySet` builds each key range as a proto-plus `KeyRange` and then the
`KeySet` message from a list of them, and proto-plus copies every nested message on the way.
Reading 1,000 posts' exact counts (spanner_reads/reads.py: their 1,000 Posts keys and 1,000
ranges of unfolded deltas) spent nearly as much of the reader's CPU on those two key sets as
the Spanner emulator spent on both reads (docs/benchmarks.md, "Measurements behind the code"): the largest part of a
big exact read after the reads themselves.

What: `KeySet` is the client's `KeySet` (same arguments, same `KeyRange`s, accepted wherever
the client takes one: reads, deletes) whose protobuf is built once, as a raw message (strings and
integers written directly, any other value in the client's own encoding, `_make_value_pb`), then
wrapped without a copy. It is the same message: tests/test_key_sets.py holds its bytes to the
client's for keys and every kind of range bound. `_to_pb` and `_make_value_pb` are the client's
private names (what `Snapshot.read` and `Batch.delete` call); that test fails if they change.
"""

from __future__ import annotations

from collections.abc import Sequence

from google.cloud import spanner
from google.cloud.spanner_v1._helpers import _make_value_pb
from google.cloud.spanner_v1.types import KeySet as KeySetMessage
from google.protobuf.struct_pb2 import ListValue

_BOUNDS = ("start_open", "start_closed", "end_open", "end_closed")


class KeySet(spanner.KeySet):
    """spanner.KeySet, whose protobuf costs one raw message instead of a proto-plus copy per key."""

    def _to_pb(self) -> KeySetMessage:
        if self.all_:
            return KeySetMessage(all_=True)
        raw = KeySetMessage.pb()()
        for key in self.keys:
            encode_values(key, raw.keys.add())
        for key_range in self.ranges:
            raw_range = raw.ranges.add()
            for bound in _BOUNDS:
                values = getattr(key_range, bound)
                if values is not None:
                    raw_bound = getattr(raw_range, bound)
                    raw_bound.SetInParent()  # an empty bound is there, and means "to the end"
                    encode_values(values, raw_bound)
        return KeySetMessage.wrap(raw)


def encode_values(values: Sequence, into: ListValue) -> None:
    """`values` into `into`, as the client encodes them: the project's usual values (STRING ids,
    INT64 hashes and counts) directly, the rest (timestamps, NULL, bytes, arrays...) through the
    client's own encoding. Also what spanner_store/mutations.py builds rows with."""
    for value in values:
        if type(value) is str:
            into.values.add().string_value = value
        elif type(value) is int:  # not bool, which is an int the client encodes otherwise
            into.values.add().string_value = str(value)
        else:
            into.values.append(_make_value_pb(value))
