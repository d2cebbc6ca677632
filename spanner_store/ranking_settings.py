"""The trending rankings' settings, recorded once per database (the RankingSettings table).

- `hot_half_life_hours`: H, which every Posts.HotKey was computed with. `upvotes provision`
  records it when it creates or migrates the database and never changes it afterwards: a
  different H is a different ranking, so changing it is an explicit recompute of every key
  (`upvotes provision --recompute-hot`, docs/reading.md). The fold reads it in each of its
  transactions and writes no HotKey while it is missing; the reads read it in their snapshot.
- `hot_settings_generation`: which backfill run owns the keys (issue 44). Every run of the
  backfill (upvotes/operations/hot_backfill.py) starts by taking the next generation, in the
  read-write transaction that records H (or keeps it) and sets `hot_backfilled` to 0; each of
  its page transactions and its last one read it again and stop when another run has taken a
  newer one. So the record, the scan and `hot_backfilled` belong to one run, and two
  provisions at once (two recomputes with different H, two first provisions) never certify keys
  computed under two half-lives: the later run takes over, the earlier one stops.
- `hot_backfilled`: 1 once the run of the current generation has given every post its HotKey
  under H and fenced it (Posts.HotKeyThrough set, schemas/posts.sql), written only by a
  transaction that finds that generation still current. Until then a hot read may miss a post
  from the index, so it never says its answer is certified. A database with no generation
  recorded (migrated by a version before issue 44, whose `hot_backfilled` vouched for keys with
  no fence) reads as not backfilled.
"""

from __future__ import annotations

from typing import NamedTuple

from google.cloud import spanner

from spanner_store.tables import RANKING_SETTING_COLUMNS, RANKING_SETTINGS

HALF_LIFE = "hot_half_life_hours"
BACKFILLED = "hot_backfilled"
GENERATION = "hot_settings_generation"


class RankingSettings(NamedTuple):
    half_life_hours: float | None  # None: not recorded yet (a database from before the hot ranking)
    backfilled: bool  # the current generation's backfill finished: every HotKey current and fenced
    generation: int  # 0: none recorded yet


def read_settings(snapshot_or_transaction) -> RankingSettings:
    """The settings, read in the caller's snapshot or transaction (one small read)."""
    values = dict(
        snapshot_or_transaction.read(
            RANKING_SETTINGS,
            columns=("Name", "Value"),
            keyset=spanner.KeySet(keys=[[HALF_LIFE], [BACKFILLED], [GENERATION]]),
        )
    )
    generation = int(values.get(GENERATION, 0))
    return RankingSettings(values.get(HALF_LIFE), generation > 0 and values.get(BACKFILLED) == 1.0, generation)


def record_setting(batch_or_transaction, name: str, value: float) -> None:
    """Writes one setting (insert or update), stamped with the commit time."""
    batch_or_transaction.insert_or_update(
        RANKING_SETTINGS, columns=RANKING_SETTING_COLUMNS, values=[(name, value, spanner.COMMIT_TIMESTAMP)]
    )
