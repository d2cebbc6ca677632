"""The local stream's message log: what makes `upvotes stream` on the DirectRunner count every
message exactly once when it is killed (SIGKILL, an out-of-memory kill, a preemption, a power cut).

Why: the local reader used to acknowledge a message as soon as it pulled it, so a hard kill lost
what was pulled and not yet written. Acknowledging only after the commit is not enough on its own:
a message's votes are spread over up to 32 shard panes and several commits, each holding other
messages' votes too, and a message redelivered after a crash lands in a new ingestion window under
a new writer generation, so its delta keys no longer collide with the half that was written. What
makes a redelivery collide is replaying the SAME pulls with the SAME ingestion stamps under the SAME
writer: every pane of an unfinished window then comes out as it was, and the sink writes only
what is missing (docs/guarantees.md, "Stopping a stream", lists every crash point).

What the log holds: an SQLite database from the standard library (journal_mode=WAL), one per
subscription and database, and beside it a directory of segment files, one per window, to which
each pull's payload is appended (written once, deleted with its window: in SQLite a payload was
written twice, to the WAL and at its checkpoint, three times the cost; docs/benchmarks.md, "Measurements behind the code"):

- `pulls`: each pull's new messages as one serialised PullResponse (in its window's segment, at an
  offset, with its length and CRC-32), with the ingestion stamp the reader gave them
  (microseconds) and the end of the window that stamp falls in. Recorded before the pull is
  emitted into the pipeline, deleted in one transaction per batch of finished windows (and their
  segments after it), once every row, vote state and dead letter derived from them is committed;
- `done`: the messages of the finished windows, by delivery key (local_runner/exactly_once.py
  `delivery_key`: the message ID and its publish time, since a restarted Pub/Sub emulator reuses
  IDs; a log of version 1 kept bare IDs, still matched until they expire), `acked` when their
  acknowledgement was sent, kept
  ACKED_KEPT_S after it (a redelivery of an acknowledged message, which Pub/Sub's at-least-once
  delivery allows, is acknowledged again and never processed) and UNACKED_KEPT_S when it could not
  be sent (a replayed message: its first delivery's ack ID died with the process; its redelivery is
  acknowledged when it comes, and only then counts as acked);
- `meta`: the writer the pulls are written under (name, generation, key format), the window length
  and the shard count they were cut with. A restart that finds pulls left replays them under that
  writer, which needs those settings unchanged (`LogMismatch` says so otherwise).

Durability. A pull is in the operating system's hands when `record_pull` returns (its payload
written to its segment, its row committed to the WAL file with synchronous=NORMAL), which a killed
process (SIGKILL, out of memory) cannot undo. A power cut or a VM lost with its disk's cache can, so
what must outlive one is forced to the disk by `sync()` (fsync of the segments written, of their
directory, then of the WAL file) before anything derived from it can reach Spanner: a pull's delta
rows and vote states are written only once its window fires, when the watermark passes the
window's end, and the reader never lets its watermark pass the end of a window whose pulls are not
synced (local_runner/exactly_once.py `hold_us`): one sync per window, not per pull. What is not
synced is safe to lose: a pull lost (or whose payload no longer matches its CRC: SQLite may sync a
row on its own, at a checkpoint, before its payload is) had no row written from it and was never
acknowledged, so Pub/Sub redelivers it, and opening the log drops it; a finished window that
reappears unfinished is replayed and finds every row written; a finished message's ID lost was
acknowledged already.

One process at a time: the log is locked (flock on a file beside it) for the life of the run, and a
second stream on the same subscription and log directory is refused (`LogBusy`). The lock dies with
its process, so a restart after a SIGKILL takes it at once.

Pure storage: no Beam, no Pub/Sub (local_runner/exactly_once.py decides what to hold and when to
acknowledge; tests/test_message_log.py tests this module alone).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import sqlite3
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NamedTuple

# Version 2 keys `done` by delivery key, version 1 by message ID (a log of version 1 opens as 2).
SCHEMA_VERSION = 2
# A redelivery of a message acknowledged this long ago is still recognised (Dataflow's own
# deduplication window is about as long). One row per message; pruned after that.
ACKED_KEPT_S = 600.0
# A finished message whose acknowledgement could not be sent is kept until its redelivery is
# acknowledged, or this long (longer than Pub/Sub keeps an unacknowledged message: 31 days at most).
UNACKED_KEPT_S = 32 * 86_400.0
PRUNE_EVERY_S = 60.0
_QUERY_CHUNK = 500  # message IDs per IN (...) query


class LogBusy(RuntimeError):
    """Another process holds this log: a second stream on the same subscription and log directory."""


class LogMismatch(RuntimeError):
    """The log holds unfinished windows cut with other settings than this run's: replaying them
    under this run's would write panes that never collide with the ones already written."""


class Writer(NamedTuple):
    """The writer a log's pulls are written under (spanner_writes/writers.py WriterClaim's fields)."""

    name: str
    generation: int
    key_format: int


@dataclass(frozen=True)
class Unfinished:
    """What a log holds of a run that did not finish writing every window it pulled."""

    pulls: int
    windows: int
    writer: Writer
    window_seconds: int
    shards: int
    last_window_end_us: int  # the end of the last window with a pull: a restart stamps nothing earlier


class Pull(NamedTuple):
    stamp_us: int
    window_end_us: int
    payload: bytes  # a serialised PullResponse: the pull's new messages


def log_path(directory: str | os.PathLike, subscription: str, database: str) -> Path:
    """The log file of a stream reading `subscription` into `database` (both full paths)."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{database.rsplit('/', 1)[-1]}.{subscription.rsplit('/', 1)[-1]}")
    digest = hashlib.sha256(f"{subscription}\n{database}".encode()).hexdigest()[:12]
    return Path(directory) / f"{readable[:80]}-{digest}.sqlite"


def window_end_us(stamp_us: int, window_seconds: int) -> int:
    """The end of the fixed window (transforms/windowing.py) an ingestion stamp falls in."""
    length = window_seconds * 1_000_000
    return (stamp_us // length + 1) * length


def in_use(directory: str | os.PathLike) -> bool:
    """Whether a running stream holds one of the logs in `directory` (its lock taken)."""
    for lock_path in Path(directory).glob("*.lock"):
        with open(lock_path, "a+") as lock_file:
            try:
                fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(lock_file, fcntl.LOCK_UN)
    return False


class MessageLog:
    """One stream's log (see the module docstring). Not thread-safe: the reader's thread uses it,
    and the main thread only once the pipeline has finished."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.segments = self.path.with_suffix(".segments")
        self.segments.mkdir(parents=True, exist_ok=True)
        self._lock_file = open(self.path.with_suffix(".lock"), "a+")
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.seek(0)
            holder = self._lock_file.read().strip() or "another process"
            self._lock_file.close()
            raise LogBusy(
                f"the stream's message log {self.path} is in use by {holder}: one `upvotes stream` per "
                "subscription and log directory (stop the other one, or give this one its own --log-dir "
                "and subscription)"
            ) from None
        self._lock_file.seek(0)
        self._lock_file.truncate()
        self._lock_file.write(f"pid {os.getpid()}\n")
        self._lock_file.flush()
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # what the disk must keep is sync()ed
        with self._transaction():
            self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS pulls (stamp_us INTEGER PRIMARY KEY, window_end_us INTEGER "
                "NOT NULL, offset INTEGER NOT NULL, length INTEGER NOT NULL, crc INTEGER NOT NULL)"
            )
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS done (message_id TEXT PRIMARY KEY, acked INTEGER NOT NULL, "
                "done_at REAL NOT NULL) WITHOUT ROWID"
            )
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('version', ?)", (str(SCHEMA_VERSION),))
            version = int(self._meta()["version"])
            if version == 1:  # its bare IDs stay, matched as such until they expire (`finished`)
                self._db.execute("UPDATE meta SET value = ? WHERE key = 'version'", (str(SCHEMA_VERSION),))
            elif version != SCHEMA_VERSION:
                raise LogMismatch(
                    f"the message log {self.path} is of version {version}, this code reads {SCHEMA_VERSION}"
                )
        self._bare_ids = self._has_bare_ids()
        self._writing: dict[int, int] = {}  # window end -> the open descriptor of its segment
        self._unsynced: set[int] = set()  # segments written since the last sync
        self._new_segment = False  # a segment created since the last sync (its directory entry too)
        self._pruned_at = 0.0
        self.syncs = 0
        self.dropped = self._drop_torn()

    def _transaction(self):
        return _Transaction(self._db)

    def _meta(self) -> dict[str, str]:
        return dict(self._db.execute("SELECT key, value FROM meta"))

    def _segment(self, window_end_us: int) -> Path:
        return self.segments / f"{window_end_us}.seg"

    def _drop_torn(self) -> int:
        """On opening: drops the pulls whose payload a power cut cut short (see the module
        docstring) and deletes the segments no pull refers to; returns how many pulls it dropped."""
        torn = [stamp for stamp, payload in self._read_pulls() if payload is None]
        if torn:
            with self._transaction():
                self._db.executemany("DELETE FROM pulls WHERE stamp_us = ?", [(stamp,) for stamp in torn])
        kept = {f"{end}.seg" for (end,) in self._db.execute("SELECT DISTINCT window_end_us FROM pulls")}
        for segment in self.segments.iterdir():
            if segment.name not in kept:
                segment.unlink()
        return len(torn)

    def _read_pulls(self) -> Iterator[tuple[int, bytes | None]]:
        """(stamp, payload, or None if it does not match its length and CRC), in stamp order."""
        files: dict[int, BinaryIO | None] = {}
        try:
            for stamp, end, offset, length, crc in self._db.execute(
                "SELECT stamp_us, window_end_us, offset, length, crc FROM pulls ORDER BY stamp_us"
            ).fetchall():
                if end not in files:
                    path = self._segment(end)
                    files[end] = open(path, "rb") if path.exists() else None
                file = files[end]
                payload = None
                if file is not None:
                    file.seek(offset)
                    payload = file.read(length)
                yield (
                    stamp,
                    payload if payload is not None and len(payload) == length and zlib.crc32(payload) == crc else None,
                )
        finally:
            for file in files.values():
                if file is not None:
                    file.close()

    def unfinished(self) -> Unfinished | None:
        """What the last run left unfinished, or None when every pull it logged was finished."""
        pulls, windows, last = self._db.execute(
            "SELECT COUNT(*), COUNT(DISTINCT window_end_us), MAX(window_end_us) FROM pulls"
        ).fetchone()
        if not pulls:
            return None
        meta = self._meta()
        return Unfinished(
            pulls,
            windows,
            Writer(meta["writer_name"], int(meta["generation"]), int(meta["key_format"])),
            int(meta["window_seconds"]),
            int(meta["shards"]),
            last,
        )

    def start_run(self, writer: Writer, window_seconds: int, shards: int) -> None:
        """Records what this run's pulls are written under (its writer, window length and shards)."""
        unfinished = self.unfinished()
        if unfinished is not None and (unfinished.writer, unfinished.window_seconds, unfinished.shards) != (
            writer,
            window_seconds,
            shards,
        ):
            raise LogMismatch(
                f"{self.path} holds unfinished windows of writer {unfinished.writer}, "
                f"{unfinished.window_seconds} s windows, {unfinished.shards} shards: replay them under those"
            )
        values = {
            "writer_name": writer.name,
            "generation": writer.generation,
            "key_format": writer.key_format,
            "window_seconds": window_seconds,
            "shards": shards,
        }
        with self._transaction():
            self._db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", [(k, str(v)) for k, v in values.items()])
        self.sync()  # the writer is durable before anything is written under it

    def set_aside(self) -> Path:
        """Closes this log and renames its files out of the way (a log of another database: see
        local_runner/streaming.py); returns where it went. Open the path again for a new one."""
        aside = self.path.with_name(f"{self.path.stem}.set-aside-{time.strftime('%Y%m%dT%H%M%S')}.sqlite")
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.close()
        for suffix in ("-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        self.path.rename(aside)
        self.segments.rename(aside.with_suffix(".segments"))
        return aside

    def record_pull(self, stamp_us: int, window_end: int, payload: bytes) -> None:
        """One pull's new messages, before they go into the pipeline (safe from a killed process at
        once; from a power cut after the next `sync()`)."""
        fd = self._writing.get(window_end)
        if fd is None:
            fd = self._writing[window_end] = os.open(
                self._segment(window_end), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
            )
            self._new_segment = True
        offset = os.lseek(fd, 0, os.SEEK_END)
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
        self._unsynced.add(window_end)
        with self._transaction():
            self._db.execute(
                "INSERT INTO pulls VALUES (?, ?, ?, ?, ?)",
                (stamp_us, window_end, offset, len(payload), zlib.crc32(payload)),
            )

    def sync(self) -> None:
        """Forces every pull recorded so far to the disk: the segments written, their directory,
        then the WAL file (SQLite replays it when it opens the log again; a checkpoint syncs what it
        moves into the database file)."""
        for window_end in self._unsynced:
            fd = self._writing.get(window_end)
            if fd is not None:
                os.fsync(fd)
        self._unsynced.clear()
        paths = [self.segments] if self._new_segment else []
        self._new_segment = False
        wal = Path(f"{self.path}-wal")
        for path in [*paths, wal] if wal.exists() else paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self.syncs += 1

    def pulls(self) -> Iterator[Pull]:
        """The unfinished pulls, in stamp order."""
        ends = dict(self._db.execute("SELECT stamp_us, window_end_us FROM pulls"))
        for stamp, payload in self._read_pulls():
            if payload is not None:  # a torn one was dropped on opening; none is torn since
                yield Pull(stamp, ends[stamp], payload)

    def _has_bare_ids(self) -> bool:
        """Whether `done` still holds bare message IDs, a log of version 1's (see `finished`)."""
        return self._db.execute("SELECT 1 FROM done WHERE instr(message_id, '@') = 0 LIMIT 1").fetchone() is not None

    def _stored_names(self, keys: list[str]) -> dict[str, str]:
        """How `done` may name each of these delivery keys: itself, and its bare message ID while a
        log of version 1's rows are kept (name -> key)."""
        names = {key: key for key in keys}
        if self._bare_ids:
            names.update((key.split("@", 1)[0], key) for key in keys)
        return names

    def finished(self, keys: Iterable[str]) -> dict[str, bool]:
        """Of these delivery keys, those of finished windows still kept, and whether each was
        acknowledged. A log of version 1's bare IDs match any delivery of their ID until they expire:
        version 1 matched so, and a redelivery of what it finished must not count twice."""
        names = self._stored_names(list(keys))
        found: dict[str, bool] = {}
        ordered = list(names)
        for start in range(0, len(ordered), _QUERY_CHUNK):
            chunk = ordered[start : start + _QUERY_CHUNK]
            found.update(
                (names[name], bool(acked))
                for name, acked in self._db.execute(
                    f"SELECT message_id, acked FROM done WHERE message_id IN ({','.join('?' * len(chunk))})", chunk
                )
            )
        return found

    def finish_windows(self, through_us: int, acked: Iterable[str], unacked: Iterable[str], now: float) -> None:
        """Every window ending at or before `through_us` is written: its pulls go, its messages
        (delivery keys) are kept as done (`acked` those whose acknowledgement was sent), in one
        transaction; then its segments."""
        ends = [
            end
            for (end,) in self._db.execute(
                "SELECT DISTINCT window_end_us FROM pulls WHERE window_end_us <= ?", (through_us,)
            )
        ]
        with self._transaction():
            self._db.execute("DELETE FROM pulls WHERE window_end_us <= ?", (through_us,))
            self._db.executemany("INSERT OR REPLACE INTO done VALUES (?, 1, ?)", ((mid, now) for mid in acked))
            self._db.executemany("INSERT OR IGNORE INTO done VALUES (?, 0, ?)", ((mid, now) for mid in unacked))
        for end in ends:
            fd = self._writing.pop(end, None)
            if fd is not None:
                os.close(fd)
            self._unsynced.discard(end)
            self._segment(end).unlink(missing_ok=True)

    def mark_acked(self, keys: Iterable[str], now: float) -> None:
        """Finished messages (delivery keys) whose redelivery was just acknowledged."""
        with self._transaction():
            self._db.executemany(
                "UPDATE done SET acked = 1, done_at = ? WHERE message_id = ?",
                ((now, name) for name in self._stored_names(list(keys))),
            )

    def prune(self, now: float, force: bool = False) -> int:
        """Forgets the done messages kept long enough (at most once per PRUNE_EVERY_S unless
        `force`); returns how many."""
        if not force and now - self._pruned_at < PRUNE_EVERY_S:
            return 0
        self._pruned_at = now
        with self._transaction():
            pruned = self._db.execute(
                "DELETE FROM done WHERE (acked = 1 AND done_at < ?) OR done_at < ?",
                (now - ACKED_KEPT_S, now - UNACKED_KEPT_S),
            ).rowcount
        if self._bare_ids and pruned:
            self._bare_ids = self._has_bare_ids()
        return pruned

    def counts(self) -> dict[str, int]:
        """Rows per table and state, and segment files (for reports and tests)."""
        pulls = self._db.execute("SELECT COUNT(*) FROM pulls").fetchone()[0]
        acked, unacked = self._db.execute(
            "SELECT COALESCE(SUM(acked), 0), COALESCE(SUM(1 - acked), 0) FROM done"
        ).fetchone()
        return {
            "pulls": pulls,
            "done_acked": acked,
            "done_unacked": unacked,
            "segments": sum(1 for _ in self.segments.iterdir()),
        }

    def close(self) -> None:
        for fd in self._writing.values():
            os.close(fd)
        self._writing.clear()
        self._db.close()
        self._lock_file.close()


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT (or ROLLBACK on an error); each COMMIT is on disk when it returns."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind, *_) -> None:
        self._db.execute("COMMIT" if kind is None else "ROLLBACK")
