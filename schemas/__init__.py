"""The storage and message contracts: Spanner DDL, the vote event JSON Schema, key hashing.

`posts.sql` is the database schema; `vote_event.schema.json` is the event contract that
publishers follow and the pipeline enforces (transforms/parse_and_sum.py).
"""

from __future__ import annotations

import hashlib
import json
import re
from importlib import resources
from typing import Any

DDL_FILE = "posts.sql"
BASELINE_DDL_FILE = "baseline_counters.sql"
EVENT_SCHEMA_FILE = "vote_event.schema.json"


def ddl_statements(file_name: str = DDL_FILE) -> list[str]:
    """A DDL file's statements, comments removed, in the order they must be applied."""
    return statements_of(resources.files(__package__).joinpath(file_name).read_text(encoding="utf-8"))


def statements_of(ddl: str) -> list[str]:
    """DDL text's statements, comments removed and whitespace folded, in order."""
    return [" ".join(s.split()) for s in re.sub(r"--[^\n]*", "", ddl).split(";") if s.strip()]


_DELTA_RETENTION = re.compile(
    r"CREATE TABLE PostDeltas .*ROW DELETION POLICY \(OLDER_THAN\(CommittedAt, INTERVAL (\d+) DAY\)\)"
)


def delta_retention_days() -> int:
    """How long Spanner keeps a delta row: the PostDeltas ROW DELETION POLICY of posts.sql,
    read from the DDL so the retention is written once. A vote whose event time is older
    than this is counted in the hour it was ingested (schemas.contract.event_hour)."""
    for statement in ddl_statements():
        if match := _DELTA_RETENTION.match(statement):
            return int(match.group(1))
    raise ValueError("posts.sql has no ROW DELETION POLICY on PostDeltas")


def event_schema() -> dict[str, Any]:
    """The vote event JSON Schema (draft 2020-12)."""
    text = resources.files(__package__).joinpath(EVENT_SCHEMA_FILE).read_text(encoding="utf-8")
    return json.loads(text)


def post_hash(post_id: str) -> int:
    """The leading key part of a post: a stable, evenly spread 63-bit hash of its ID.

    Sequential IDs ("p-1", "p-2", ...) would otherwise sort next to each other and send
    every new post to the same split. Every writer and reader derives it the same way.
    """
    digest = hashlib.blake2b(post_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def user_hash(user_id: str) -> int:
    """The leading key part of a user's votes (the Votes table): the same hash, of the user ID."""
    return post_hash(user_id)
