"""The hot ranking on an existing database: record its half-life, then give every post its
HotKey from its hourly rows (what `upvotes provision` runs after the schema change).

Safe under a running stream and fold, with no vote lost or counted twice: the backfill writes
only HotKey, never a count, and computes it in a read-write transaction from the post's hourly
rows as they are then (spanner_store/hot_keys.py, exactly as the fold does). Spanner serialises
it with every fold transaction on the same post, and each of the two computes the key of the
rows it sees, so whichever commits last leaves the key of the current rows. The half-life is
recorded first: a fold transaction that read it missing (and wrote no key) is serialised before
that record, so the scan, which starts after it, sees and fills that post.

The scan reads every post once, a page of keys at a time (a one-off migration, proportional to
the catalogue; a fresh database has nothing to scan). `hot_backfilled` is recorded only at the
end: until then hot reads are never certified. A rerun after a run cut short writes every key
again: a recompute cut short leaves keys of the old half-life beside the new ones.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from google.cloud import spanner

from spanner_store.database import commit_mutations, run_transaction, run_with_retries
from spanner_store.hot_keys import hot_keys_of, read_post_hours
from spanner_store.ranking_settings import BACKFILLED, HALF_LIFE, read_settings, record_setting
from spanner_store.tables import HOT_KEY, POSTS, PostKey

PAGE = 500  # posts per read and per transaction


class BackfillReport(NamedTuple):
    half_life_hours: float
    posts_scanned: int
    keys_written: int


def ensure_hot_ranking(database, half_life_hours: float, log: Callable[[str], None],
                       recompute: bool = False) -> BackfillReport:
    """Records the half-life (kept as recorded unless `recompute`), then backfills every missing
    HotKey (every HotKey when `recompute`), then records that the backfill is complete."""
    with database.snapshot() as snapshot:
        settings = read_settings(snapshot)
    recorded = settings.half_life_hours
    if recorded is not None and recorded != half_life_hours and not recompute:
        log(f"kept    hot half-life {recorded:g} h (recorded for this database; changing it to "
            f"{half_life_hours:g} h recomputes every post's score: pass --recompute-hot)")
        half_life_hours = recorded
    if recorded is None or recompute:
        def record(batch) -> None:
            record_setting(batch, HALF_LIFE, half_life_hours)
            record_setting(batch, BACKFILLED, 0.0)
        run_with_retries(lambda: commit_mutations(database, record))
        log(f"recorded hot half-life {half_life_hours:g} h")
    elif settings.backfilled:
        return BackfillReport(half_life_hours, 0, 0)
    else:
        # A run cut short: a recompute leaves keys of the previous half-life, which no row tells
        # apart from the others, so every key is written again.
        recompute = True
    scanned = written = 0
    for page in _pages(database):
        scanned += len(page)
        todo = [key for key, hot_key in page if hot_key is None or recompute]
        if todo:
            written += run_with_retries(lambda: run_transaction(
                database, lambda txn: _write_keys(txn, todo, recompute)))
        if scanned % (PAGE * 100) < PAGE:
            log(f"backfill: {scanned:,} posts scanned, {written:,} hot scores written")
    run_with_retries(lambda: commit_mutations(database, lambda batch: record_setting(batch, BACKFILLED, 1.0)))
    log(f"backfilled hot scores: {scanned:,} posts scanned, {written:,} written")
    return BackfillReport(half_life_hours, scanned, written)


def _pages(database):
    """Pages of (PostKey, HotKey) in key order, each read in its own strong snapshot."""
    after: list | None = None
    while True:
        keyset = spanner.KeySet(ranges=[spanner.KeyRange(start_open=after)]) if after else spanner.KeySet(all_=True)
        with database.snapshot() as snapshot:
            page = [((h, p), hot_key) for h, p, hot_key in snapshot.read(
                POSTS, columns=("PostHash", "PostId", HOT_KEY), keyset=keyset, limit=PAGE)]
        if not page:
            return
        yield page
        after = list(page[-1][0])


def _write_keys(transaction, posts: list[PostKey], recompute: bool) -> int:
    """In one transaction: the HotKey of each post still missing one (every post when
    `recompute`), from its hourly rows. Returns the keys written."""
    current = {(h, p): hot_key for h, p, hot_key in transaction.read(
        POSTS, columns=("PostHash", "PostId", HOT_KEY), keyset=spanner.KeySet(keys=[list(k) for k in posts]))}
    todo = [key for key, hot_key in current.items() if hot_key is None or recompute]
    hours = {post: post_hours for post, post_hours in read_post_hours(transaction, todo).items() if post_hours}
    rows = [(h, p, key) for (h, p), key in hot_keys_of(transaction, hours).items()]  # no hourly row: NULL stays
    if rows:
        transaction.update(POSTS, columns=("PostHash", "PostId", HOT_KEY), values=rows)
    return len(rows)
