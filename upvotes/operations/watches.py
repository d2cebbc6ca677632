"""What `upvotes status` must watch, recorded by `upvotes provision` in the StatusWatches table.

Each row names one Pub/Sub resource by its role (VOTES_SUBSCRIPTION, DEAD_LETTER_SUBSCRIPTION,
and the two topics) with its full path. `record` rewrites them (insert_or_update: provisioning
again changes nothing, and a renamed resource replaces the old row); `recorded` reads them.
"""

from __future__ import annotations

from google.cloud import spanner

from spanner_store.tables import STATUS_WATCH_COLUMNS, STATUS_WATCHES

VOTES_TOPIC = "votes_topic"
VOTES_SUBSCRIPTION = "votes_subscription"
DEAD_LETTER_TOPIC = "dead_letter_topic"
DEAD_LETTER_SUBSCRIPTION = "dead_letter_subscription"
ROLES = (VOTES_TOPIC, VOTES_SUBSCRIPTION, DEAD_LETTER_TOPIC, DEAD_LETTER_SUBSCRIPTION)


def record(database, resources: dict[str, str]) -> None:
    """Records {role: full resource path} in one commit."""
    unknown = set(resources) - set(ROLES)
    if unknown:
        raise ValueError(f"unknown roles: {sorted(unknown)}")
    with database.batch() as batch:
        batch.insert_or_update(
            STATUS_WATCHES,
            columns=STATUS_WATCH_COLUMNS,
            values=[(role, path, spanner.COMMIT_TIMESTAMP) for role, path in sorted(resources.items())],
        )


def recorded(database) -> dict[str, str]:
    """{role: full resource path} as provisioned; empty if nothing was recorded."""
    with database.snapshot() as snapshot:
        return {
            role: path
            for role, path in snapshot.read(
                STATUS_WATCHES, columns=("Role", "Resource"), keyset=spanner.KeySet(all_=True)
            )
        }
