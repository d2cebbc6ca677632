"""Idempotent provisioning and migration: Pub/Sub topics and subscriptions, the Spanner instance
and database, and the schema changes a new version needs (what `upvotes provision` runs, in
production as locally).

Every step first looks, then creates only what is missing, so a second run succeeds and
changes nothing. On the emulator the Spanner instance is created too; on a real project
only when asked (`create_instance=True`), since an instance is billed by the hour.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from google.api_core import exceptions
from google.cloud import pubsub_v1, spanner

import schemas
from schemas.ddl import (
    check_constraints,
    column_default,
    column_options,
    ddl_object_name,
    nullable,
    stored_columns,
    table_columns,
)
from schemas.hot_score import DEFAULT_HALF_LIFE_HOURS
from spanner_store.database import OPERATION_TIMEOUT_S, open_database
from upvotes.operations.hot_backfill import ensure_hot_ranking
from upvotes.resources import Resources

EMULATOR_INSTANCE_CONFIG = "emulator-config"
DEFAULT_INSTANCE_CONFIG = "regional-us-central1"


def missing_ddl(existing: list[str], wanted: list[str]) -> list[str]:
    """The statements of `wanted` whose table or index is not created by `existing`."""
    have = {ddl_object_name(s) for s in existing}
    return [s for s in wanted if ddl_object_name(s) not in have]


def missing_columns(existing: list[str], wanted: list[str]) -> list[tuple[str, str]]:
    """(table, column definition as added) of each column of a `wanted` table that the existing
    table lacks. Only nullable columns (or NOT NULL with a DEFAULT) can be added to a table with
    rows; posts.sql keeps new columns that way. A nullable column is added without its DEFAULT:
    Spanner would write the default into every row already there, while NULL is how such a
    column tells those rows apart (Posts.HotKeyThrough: not yet backfilled); `missing_defaults`
    gives it its default afterwards, for the rows written from then on."""
    have = dict(filter(None, map(table_columns, existing)))
    return [
        (table, _as_added(definition))
        for table, columns in filter(None, map(table_columns, wanted))
        if table in have
        for column, definition in columns.items()
        if column not in have[table]
    ]


def _as_added(definition: str) -> str:
    """A column definition as ADD COLUMN takes it: a nullable one without its DEFAULT."""
    split = column_default(definition)
    return split[0] if split is not None and nullable(definition) else definition


def missing_defaults(existing: list[str], wanted: list[str]) -> list[tuple[str, str, str]]:
    """(table, column, default expression) of each nullable column of a `wanted` table with a
    DEFAULT that the existing table's column lacks, or that it lacks altogether (added without
    it, `missing_columns`)."""
    have = dict(filter(None, map(table_columns, existing)))
    return [
        (table, column, split[1])
        for table, columns in filter(None, map(table_columns, wanted))
        if table in have
        for column, definition in columns.items()
        if nullable(definition)
        and (split := column_default(definition)) is not None
        and (column not in have[table] or column_default(have[table][column]) is None)
    ]


def missing_constraints(existing: list[str], wanted: list[str]) -> list[tuple[str, str]]:
    """(table, constraint definition) of each CHECK constraint of a `wanted` table that the
    existing table lacks, by name."""
    have = dict(filter(None, map(check_constraints, existing)))
    return [
        (table, definition)
        for table, constraints in filter(None, map(check_constraints, wanted))
        if table in have
        for name, definition in constraints.items()
        if name not in have[table]
    ]


def missing_stored_columns(existing: list[str], wanted: list[str]) -> list[tuple[str, str]]:
    """(index, column) of each STORING column of a `wanted` index that the existing index lacks."""
    have = dict(filter(None, map(stored_columns, existing)))
    return [
        (index, column)
        for index, columns in filter(None, map(stored_columns, wanted))
        if index in have
        for column in columns
        if column not in have[index]
    ]


def extra_stored_columns(existing: list[str], wanted: list[str]) -> list[tuple[str, str]]:
    """(index, column) of each STORING column of an existing index that the `wanted` index no
    longer stores (each write of an entry costs a mutation per stored column)."""
    want = dict(filter(None, map(stored_columns, wanted)))
    return [
        (index, column)
        for index, columns in filter(None, map(stored_columns, existing))
        if index in want
        for column in columns
        if column not in want[index]
    ]


def drop_stored_column_ddl(index: str, column: str) -> str:
    """The DDL dropping a stored column from an index; both parts come from the database's own DDL
    and posts.sql, never from input."""
    return f"ALTER INDEX {index} DROP STORED COLUMN {column}"


def add_stored_column_ddl(index: str, column: str) -> str:
    """The DDL adding a stored column to an index; both parts come from posts.sql itself."""
    return f"ALTER INDEX {index} ADD STORED COLUMN {column}"


def add_column_ddl(table: str, definition: str) -> str:
    """The DDL adding a column; both parts come from posts.sql itself, never from input."""
    return f"ALTER TABLE {table} ADD COLUMN {definition}"


def missing_column_options(existing: list[str], wanted: list[str]) -> list[tuple[str, str, dict[str, str]]]:
    """(table, column, {option: value}) of each existing column lacking options its `wanted`
    definition declares, or holding another value (a column made a commit-timestamp column in a
    later version). Options the database has and posts.sql does not are left as they are."""
    have = dict(filter(None, map(table_columns, existing)))
    changes = []
    for table, columns in filter(None, map(table_columns, wanted)):
        for column, definition in columns.items():
            if column not in have.get(table, {}):
                continue  # a new table or column is created with its options
            present = column_options(have[table][column])
            lacking = {name: value for name, value in column_options(definition).items() if present.get(name) != value}
            if lacking:
                changes.append((table, column, lacking))
    return changes


def set_column_options_ddl(table: str, column: str, options: dict[str, str]) -> str:
    """The DDL setting a column's options; every part comes from posts.sql itself, never from input."""
    settings = ", ".join(f"{name} = {value}" for name, value in options.items())
    return f"ALTER TABLE {table} ALTER COLUMN {column} SET OPTIONS ({settings})"


def set_default_ddl(table: str, column: str, expression: str) -> str:
    """The DDL giving a column its default; every part comes from posts.sql itself."""
    return f"ALTER TABLE {table} ALTER COLUMN {column} SET DEFAULT {expression}"


def add_constraint_ddl(table: str, definition: str) -> str:
    """The DDL adding a constraint (`CONSTRAINT name CHECK (...)`); both parts come from posts.sql."""
    return f"ALTER TABLE {table} ADD {definition}"


def provision_pubsub(res: Resources, log: Callable[[str], None]) -> None:
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    try:
        for topic in (res.topic, res.dead_letter_topic):
            _create(f"topic {topic}", lambda: publisher.create_topic(name=res.topic_path(topic)), log)  # called at once
        pairs = ((res.subscription, res.topic), (res.dead_letter_subscription_id, res.dead_letter_topic))
        for subscription, topic in pairs:
            _create(
                f"subscription {subscription} on {topic}",
                lambda: subscriber.create_subscription(  # called at once
                    request={
                        "name": res.subscription_path(subscription),
                        "topic": res.topic_path(topic),
                        "ack_deadline_seconds": 60,
                    }
                ),
                log,
            )
    finally:
        subscriber.close()


def _create(what: str, create: Callable[[], object], log: Callable[[str], None]) -> None:
    try:
        create()
        log(f"created {what}")
    except exceptions.AlreadyExists:
        log(f"exists  {what}")


def provision_spanner(
    res: Resources,
    create_instance: bool,
    instance_config: str,
    log: Callable[[str], None],
    hot_half_life_hours: float = DEFAULT_HALF_LIFE_HOURS,
    recompute_hot: bool = False,
) -> None:
    """The instance, the database and every schema object missing from it, then the hot
    ranking's half-life and backfill (upvotes/operations/hot_backfill.py)."""
    database = _provision_database(res, create_instance, instance_config, log)
    ensure_hot_ranking(database, hot_half_life_hours, log, recompute_hot)


def _provision_database(res: Resources, create_instance: bool, instance_config: str, log: Callable[[str], None]):
    client = spanner.Client(project=res.project)
    instance = client.instance(res.instance)
    on_emulator = bool(os.environ.get("SPANNER_EMULATOR_HOST"))
    if not instance.exists():
        if not (on_emulator or create_instance):
            raise RuntimeError(
                f"Spanner instance {res.instance} does not exist in project {res.project}. Create it "
                "(gcloud spanner instances create ...) or pass --create-instance."
            )
        config = (
            f"projects/{res.project}/instanceConfigs/{EMULATOR_INSTANCE_CONFIG if on_emulator else instance_config}"
        )
        instance = client.instance(res.instance, configuration_name=config, display_name=res.instance, node_count=1)
        _create(f"Spanner instance {res.instance}", lambda: instance.create().result(OPERATION_TIMEOUT_S), log)
    else:
        log(f"exists  Spanner instance {res.instance}")

    wanted = schemas.ddl_statements()
    database = open_database(res.project, res.instance, res.database)
    if not database.exists():
        database = instance.database(res.database, ddl_statements=wanted)
        _create(
            f"database {res.database} with {len(wanted)} DDL statements",
            lambda: database.create().result(OPERATION_TIMEOUT_S),
            log,
        )
        return open_database(res.project, res.instance, res.database)
    database.reload()
    existing = list(database.ddl_statements)
    todo = missing_ddl(existing, wanted)
    new_columns = missing_columns(existing, wanted)
    new_stored = missing_stored_columns(existing, wanted)
    dropped_stored = extra_stored_columns(existing, wanted)
    new_options = missing_column_options(existing, wanted)
    new_constraints = missing_constraints(existing, wanted)
    new_defaults = missing_defaults(existing, wanted)
    if todo or new_columns or new_stored or dropped_stored or new_options or new_constraints or new_defaults:
        # Columns first: a stored column must exist in its table before an index stores it, and
        # a constraint's columns before it. Constraints before defaults: a row written between
        # the two by a writer older than the column would otherwise hold the default beside
        # moved columns, and the constraint, checked against every row when it is added, would
        # fail (Posts.HotKeyCurrent); until its default, a new column is NULL in new rows too.
        database.update_ddl(
            [add_column_ddl(*c) for c in new_columns]
            + [add_stored_column_ddl(*c) for c in new_stored]
            + [drop_stored_column_ddl(*c) for c in dropped_stored]
            + [set_column_options_ddl(*c) for c in new_options]
            + todo
            + [add_constraint_ddl(*c) for c in new_constraints]
            + [set_default_ddl(*d) for d in new_defaults]
        ).result(OPERATION_TIMEOUT_S)
        for table, definition in new_columns:
            log(f"added   column {table}.{definition}")
        for table, column, options in new_options:
            log(f"set     options {table}.{column} ({', '.join(f'{k} = {v}' for k, v in options.items())})")
        for index, column in new_stored:
            log(f"added   stored column {index}.{column}")
        for index, column in dropped_stored:
            log(f"dropped stored column {index}.{column} (no longer read from the index)")
        for statement in todo:
            log(f"created {ddl_object_name(statement)}")
        for table, definition in new_constraints:
            log(f"added   constraint {table}.{definition.split()[1]}")
        for table, column, expression in new_defaults:
            log(f"set     default {table}.{column} {expression}")
    log(f"exists  database {res.database} ({len(wanted) - len(todo)} of {len(wanted)} schema objects were there)")
    return database


def provision(
    res: Resources,
    create_instance: bool = False,
    instance_config: str = DEFAULT_INSTANCE_CONFIG,
    log: Callable[[str], None] = print,
    hot_half_life_hours: float = DEFAULT_HALF_LIFE_HOURS,
    recompute_hot: bool = False,
) -> None:
    """Creates whatever of `res` is missing; safe to run any number of times."""
    provision_pubsub(res, log)
    provision_spanner(res, create_instance, instance_config, log, hot_half_life_hours, recompute_hot)
    record_watches(res, log)


def record_watches(res: Resources, log: Callable[[str], None]) -> None:
    """Records in the database the topics and subscriptions `upvotes status` must watch
    (upvotes/operations/watches.py), so that it checks them without being told."""
    from upvotes.operations import watches

    watched = {
        watches.VOTES_TOPIC: res.topic_path(res.topic),
        watches.VOTES_SUBSCRIPTION: res.subscription_path(res.subscription),
        watches.DEAD_LETTER_TOPIC: res.topic_path(res.dead_letter_topic),
        watches.DEAD_LETTER_SUBSCRIPTION: res.subscription_path(res.dead_letter_subscription_id),
    }
    watches.record(open_database(res.project, res.instance, res.database), watched)
    log(f"recorded what `upvotes status` watches: {', '.join(watched.values())}")
