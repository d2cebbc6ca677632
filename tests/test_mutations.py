"""spanner_store/mutations.py: the same Mutation protobufs as the client library's, byte for byte,
for every kind of value the project writes; and a commit of them lands as the client's would."""

from __future__ import annotations

import base64
from datetime import datetime, timedelta, timezone

from google.cloud import spanner
from google.cloud.spanner_v1.batch import Batch
from hypothesis import given
from hypothesis import strategies as st

from spanner_store import mutations

EPOCH = datetime(2020, 1, 1, tzinfo=timezone.utc)
values = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.text(max_size=12),
    st.booleans(),
    st.none(),
    st.binary(max_size=16).map(base64.b64encode),  # BYTES go base64-encoded, as the client wants
    st.floats(allow_nan=False),
    st.integers(0, 10**15).map(lambda us: EPOCH + timedelta(microseconds=us)),
    st.just(spanner.COMMIT_TIMESTAMP),
    st.lists(st.text(max_size=8), max_size=4),
)


def built(write) -> list[bytes]:
    batch = Batch.__new__(Batch)
    batch._mutations = []
    write(batch)
    return [type(m).serialize(m) for m in batch._mutations]


@given(
    st.sampled_from(["insert", "insert_or_update", "update"]),
    st.integers(1, 4).flatmap(lambda width: st.lists(st.lists(values, min_size=width, max_size=width), max_size=5)),
)
def test_the_same_mutation_as_the_clients(kind: str, rows: list[list]) -> None:
    columns = [f"C{i}" for i in range(len(rows[0]) if rows else 2)]
    ours = built(lambda batch: getattr(mutations, kind)(batch, "T", columns, rows))
    theirs = built(lambda batch: getattr(batch, kind)("T", columns, rows))
    assert ours == theirs


def test_a_commit_of_them_lands_as_the_clients_would(database) -> None:
    from spanner_store.tables import post_key

    with database.batch() as batch:
        mutations.insert_or_update(batch, "Posts", ("PostHash", "PostId", "Upvotes"), [(*post_key("raw-1"), 7)])
    with database.snapshot() as snapshot:
        assert list(
            snapshot.read("Posts", columns=("PostId", "Upvotes"), keyset=spanner.KeySet(keys=[list(post_key("raw-1"))]))
        ) == [["raw-1", 7]]
