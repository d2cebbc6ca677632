"""The hot ranking on an existing database: record its half-life, then give every post its
HotKey from its hourly rows and fence it (Posts.HotKeyThrough, schemas/posts.sql), what
`upvotes provision` runs after the schema change.

Safe under a running stream and fold, with no vote lost or counted twice: the backfill writes
only HotKey and HotKeyThrough, never a count, and computes the key in a read-write transaction
from the post's hourly rows and hourly watermark as they are then (spanner_store/hot_keys.py,
exactly as the fold does). Spanner serialises it with every fold transaction on the same post,
and each of the two computes the key of the rows it sees, so whichever commits last leaves the
key of the current rows. Fenced, a post's key stays that of its rows: a fold of this version
keeps both in step, and the database rejects any older fold's move of the post's watermarks
(the HotKeyCurrent constraint). The half-life is recorded first: a fold transaction that read it
missing (and wrote no key) left its post unfenced and is serialised before that record, so the
scan, which starts after it, sees and fills that post.

One run, one generation (spanner_store/ranking_settings.py): the run records the next
generation with H (kept as recorded unless recomputing) and `hot_backfilled` = 0, and
`hot_backfilled` = 1 at its end, so a database whose `hot_backfilled` was recorded by a version
before the fence is not certified until a run of this one has fenced every post.

Which posts a run writes: the run that records a database's first half-life only those not yet
fenced (no key can have been computed under another H: a fold writes none while H is missing,
and leaves the post unfenced); every other run, a recompute, a rerun of a run cut short or the
first of this version on a database migrated by an earlier one, every post: keys of a previous
half-life are fenced too, and nothing tells them apart. The scan reads every post once, a page
of keys at a time (a one-off migration, proportional to the catalogue; a fresh database has
nothing to scan).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from google.cloud import spanner

from spanner_store.database import commit_mutations, run_transaction, run_with_retries
from spanner_store.hot_keys import hot_keys_of, read_post_hours
from spanner_store.ranking_settings import BACKFILLED, GENERATION, HALF_LIFE, read_settings, record_setting
from spanner_store.tables import HOT_KEY, HOT_KEY_THROUGH, HOURLY_WATERMARK, POSTS, PostKey
from spanner_store.unfolded import hourly_watermark

PAGE = 500  # posts per read and per transaction


class BackfillReport(NamedTuple):
    half_life_hours: float
    posts_scanned: int
    keys_written: int  # posts given their HotKey and fenced


def ensure_hot_ranking(database, half_life_hours: float, log: Callable[[str], None],
                       recompute: bool = False) -> BackfillReport:
    """Records the half-life (kept as recorded unless `recompute`) under a new generation, then
    gives every post that needs one its HotKey and fence (every post unless this run recorded
    the database's first half-life), then records that the backfill is complete."""
    with database.snapshot() as snapshot:
        settings = read_settings(snapshot)
    recorded = settings.half_life_hours
    if recorded is not None and recorded != half_life_hours and not recompute:
        log(f"kept    hot half-life {recorded:g} h (recorded for this database; changing it to "
            f"{half_life_hours:g} h recomputes every post's score: pass --recompute-hot)")
    if recorded is not None and settings.backfilled and not recompute:
        return BackfillReport(recorded, 0, 0)
    half_life = half_life_hours if recorded is None or recompute else recorded
    every_post = recorded is not None

    def record(batch) -> None:
        if half_life != recorded:
            record_setting(batch, HALF_LIFE, half_life)
        record_setting(batch, GENERATION, float(settings.generation + 1))
        record_setting(batch, BACKFILLED, 0.0)
    run_with_retries(lambda: commit_mutations(database, record))
    if recorded is None or recompute:
        log(f"recorded hot half-life {half_life:g} h")
    scanned = written = 0
    for page in _pages(database):
        scanned += len(page)
        todo = [key for key, through in page if through is None or every_post]
        if todo:
            written += run_with_retries(lambda: run_transaction(
                database, lambda txn: _write_keys(txn, todo, every_post)))
        if scanned % (PAGE * 100) < PAGE:
            log(f"backfill: {scanned:,} posts scanned, {written:,} hot scores written")
    run_with_retries(lambda: commit_mutations(database, lambda batch: record_setting(batch, BACKFILLED, 1.0)))
    log(f"backfilled hot scores: {scanned:,} posts scanned, {written:,} written")
    return BackfillReport(half_life, scanned, written)


def _pages(database):
    """Pages of (PostKey, HotKeyThrough) in key order, each read in its own strong snapshot."""
    after: list | None = None
    while True:
        keyset = spanner.KeySet(ranges=[spanner.KeyRange(start_open=after)]) if after else spanner.KeySet(all_=True)
        with database.snapshot() as snapshot:
            page = [((h, p), through) for h, p, through in snapshot.read(
                POSTS, columns=("PostHash", "PostId", HOT_KEY_THROUGH), keyset=keyset, limit=PAGE)]
        if not page:
            return
        yield page
        after = list(page[-1][0])


def _write_keys(transaction, posts: list[PostKey], every_post: bool) -> int:
    """In one transaction: the HotKey of each of these posts still unfenced (every one when
    `every_post`) from all of its hourly rows (NULL with none), with HotKeyThrough at its
    hourly watermark. Returns the posts written."""
    marks = {(h, p): hourly_watermark(folded, hourly) for h, p, folded, hourly, through in transaction.read(
        POSTS, columns=("PostHash", "PostId", "FoldedThrough", HOURLY_WATERMARK, HOT_KEY_THROUGH),
        keyset=spanner.KeySet(keys=[list(k) for k in posts])) if through is None or every_post}
    hours = {post: post_hours for post, post_hours in read_post_hours(transaction, marks).items() if post_hours}
    keys = hot_keys_of(transaction, hours)  # with the H this transaction reads
    rows = [(h, p, keys.get((h, p)), mark) for (h, p), mark in marks.items()]
    if rows:
        transaction.update(POSTS, columns=("PostHash", "PostId", HOT_KEY, HOT_KEY_THROUGH), values=rows)
    return len(rows)
