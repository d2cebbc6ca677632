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
(the HotKeyCurrent constraint).

One run, one generation (spanner_store/ranking_settings.py): the run's first transaction reads
the settings and records the next generation with H (kept as recorded unless recomputing) and
`hot_backfilled` = 0; every page transaction reads the generation again and stops when another
run took a newer one, and computes its keys with the H it reads in that transaction; the run's
last transaction records `hot_backfilled` = 1 only if its generation is still current. So two
provisions at once end with every key of the last run's H, and certified only then.

Which posts a run writes: the run that records a database's first half-life only those not yet
fenced (no key can have been computed under another H: a fold writes none while H is missing,
and leaves the post unfenced); every other run, a recompute, a rerun of a run cut short or one
taking over from another, every post: keys of a previous half-life are fenced too, and nothing
tells them apart. The scan reads every post once, a page of keys at a time (a one-off
migration, proportional to the catalogue; a fresh database has nothing to scan).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from typing import NamedTuple

from google.cloud import spanner

from spanner_store.database import run_transaction, run_with_retries
from spanner_store.hot_keys import hot_keys_of, read_post_hours
from spanner_store.ranking_settings import BACKFILLED, GENERATION, HALF_LIFE, read_settings, record_setting
from spanner_store.tables import HOT_KEY, HOT_KEY_THROUGH, HOURLY_WATERMARK, POSTS, PostKey
from spanner_store.unfolded import hourly_watermark

PAGE = 500  # posts per read and per transaction


class BackfillReport(NamedTuple):
    half_life_hours: float
    posts_scanned: int
    keys_written: int  # posts given their HotKey and fenced
    finished: bool  # False: another provision took over, and finishes the backfill


class BackfillRun(NamedTuple):
    """One run of the backfill, as its first transaction recorded it."""

    generation: int
    half_life_hours: float
    every_post: bool  # write every post's key; False: only the posts not yet fenced


class _Start(NamedTuple):
    run: BackfillRun | None  # None: the current generation's backfill is finished, nothing to do
    recorded: float | None  # the half-life recorded before this run


def ensure_hot_ranking(
    database, half_life_hours: float, log: Callable[[str], None], recompute: bool = False
) -> BackfillReport:
    """Records the half-life (kept as recorded unless `recompute`) under a new generation, then
    gives every post that needs one its HotKey and fence (every post unless this run recorded
    the database's first half-life), then records that the backfill is complete, unless another
    provision took over meanwhile (see the module docstring)."""
    start = run_with_retries(lambda: run_transaction(database, lambda txn: _start(txn, half_life_hours, recompute)))
    recorded = start.recorded
    if recorded is not None and recorded != half_life_hours and not recompute:
        log(
            f"kept    hot half-life {recorded:g} h (recorded for this database; changing it to "
            f"{half_life_hours:g} h recomputes every post's score: pass --recompute-hot)"
        )
    run = start.run
    if run is None:
        assert recorded is not None  # no run: the recorded half-life's backfill is finished
        return BackfillReport(recorded, 0, 0, True)
    if recorded is None or recompute:
        log(f"recorded hot half-life {run.half_life_hours:g} h")
    scanned = written = 0
    for page in _pages(database):
        scanned += len(page)
        todo = [key for key, through in page if through is None or run.every_post]
        if todo:
            done = run_with_retries(lambda: run_transaction(database, lambda txn: _write_keys(txn, todo, run)))
            if done is None:
                return _taken_over(run, scanned, written, log)
            written += done
        if scanned % (PAGE * 100) < PAGE:
            log(f"backfill: {scanned:,} posts scanned, {written:,} hot scores written")
    if not run_with_retries(lambda: run_transaction(database, lambda txn: _finish(txn, run))):
        return _taken_over(run, scanned, written, log)
    log(f"backfilled hot scores: {scanned:,} posts scanned, {written:,} written")
    return BackfillReport(run.half_life_hours, scanned, written, True)


def _start(transaction, half_life_hours: float, recompute: bool) -> _Start:
    """The run's first transaction: the next generation, with H and `hot_backfilled` = 0; none
    when the current generation's backfill is finished and nothing is to be recomputed. H is
    the one recorded, even by a provision racing this one, unless `recompute`."""
    settings = read_settings(transaction)
    recorded = settings.half_life_hours
    if recorded is not None and settings.backfilled and not recompute:
        return _Start(None, recorded)
    half_life = half_life_hours if recorded is None or recompute else recorded
    generation = settings.generation + 1
    if half_life != recorded:
        record_setting(transaction, HALF_LIFE, half_life)
    record_setting(transaction, GENERATION, float(generation))
    record_setting(transaction, BACKFILLED, 0.0)
    return _Start(BackfillRun(generation, half_life, every_post=recorded is not None), recorded)


def _taken_over(run: BackfillRun, scanned: int, written: int, log: Callable[[str], None]) -> BackfillReport:
    log(
        f"stopped the hot score backfill after {scanned:,} posts scanned: another provision took it over "
        f"(generation {run.generation} is no longer current) and finishes it"
    )
    return BackfillReport(run.half_life_hours, scanned, written, False)


def _pages(database) -> Iterator[list[tuple[PostKey, datetime | None]]]:
    """Pages of (PostKey, HotKeyThrough) in key order, each read in its own strong snapshot."""
    after: list | None = None
    while True:
        keyset = spanner.KeySet(ranges=[spanner.KeyRange(start_open=after)]) if after else spanner.KeySet(all_=True)
        with database.snapshot() as snapshot:
            page = [
                ((h, p), through)
                for h, p, through in snapshot.read(
                    POSTS, columns=("PostHash", "PostId", HOT_KEY_THROUGH), keyset=keyset, limit=PAGE
                )
            ]
        if not page:
            return
        yield page
        after = list(page[-1][0])


def _write_keys(transaction, posts: list[PostKey], run: BackfillRun) -> int | None:
    """In one transaction: the HotKey of each of these posts still unfenced (every one when
    `run.every_post`) from all of its hourly rows (NULL with none), with HotKeyThrough at its
    hourly watermark. Returns the posts written; None when `run` no longer owns the keys
    (another run took a newer generation)."""
    if read_settings(transaction).generation != run.generation:
        return None
    marks = {
        (h, p): hourly_watermark(folded, hourly)
        for h, p, folded, hourly, through in transaction.read(
            POSTS,
            columns=("PostHash", "PostId", "FoldedThrough", HOURLY_WATERMARK, HOT_KEY_THROUGH),
            keyset=spanner.KeySet(keys=[list(k) for k in posts]),
        )
        if through is None or run.every_post
    }
    hours = {post: post_hours for post, post_hours in read_post_hours(transaction, marks).items() if post_hours}
    keys = hot_keys_of(transaction, hours)  # with the H this transaction reads: the generation's
    rows = [(h, p, keys.get((h, p)), mark) for (h, p), mark in marks.items()]
    if rows:
        transaction.update(POSTS, columns=("PostHash", "PostId", HOT_KEY, HOT_KEY_THROUGH), values=rows)
    return len(rows)


def _finish(transaction, run: BackfillRun) -> bool:
    """The run's last transaction: `hot_backfilled` = 1 if its generation is still current."""
    if read_settings(transaction).generation != run.generation:
        return False
    record_setting(transaction, BACKFILLED, 1.0)
    return True
