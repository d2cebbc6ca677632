"""Idempotent provisioning: Pub/Sub topics and subscriptions, the Spanner instance and database.

Every step first looks, then creates only what is missing, so a second run succeeds and
changes nothing. On the emulator the Spanner instance is created too; on a real project
only when asked (`create_instance=True`), since an instance is billed by the hour.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Callable

from google.api_core import exceptions
from google.cloud import pubsub_v1, spanner

import schemas
from spanner_store.database import OPERATION_TIMEOUT_S, open_database

EMULATOR_INSTANCE_CONFIG = "emulator-config"
DEFAULT_INSTANCE_CONFIG = "regional-us-central1"
_DDL_OBJECT = re.compile(r"^CREATE\s+(?:UNIQUE\s+)?(?:NULL_FILTERED\s+)?(TABLE|INDEX)\s+(\w+)", re.IGNORECASE)


@dataclass(frozen=True)
class Resources:
    """Everything `provision` creates; names are short IDs, not full paths."""

    project: str
    instance: str
    database: str
    topic: str
    subscription: str
    dead_letter_topic: str
    dead_letter_subscription: str = ""

    @property
    def dead_letter_subscription_id(self) -> str:
        return self.dead_letter_subscription or f"{self.dead_letter_topic}-kept"

    def topic_path(self, topic: str) -> str:
        return f"projects/{self.project}/topics/{topic}"

    def subscription_path(self, subscription: str) -> str:
        return f"projects/{self.project}/subscriptions/{subscription}"


def ddl_object_name(statement: str) -> str | None:
    """`TABLE Posts` / `INDEX PostsByUpvotes` for a CREATE statement, else None."""
    match = _DDL_OBJECT.match(statement.strip())
    return f"{match.group(1).upper()} {match.group(2)}" if match else None


def missing_ddl(existing: list[str], wanted: list[str]) -> list[str]:
    """The statements of `wanted` whose table or index is not created by `existing`."""
    have = {ddl_object_name(s) for s in existing}
    return [s for s in wanted if ddl_object_name(s) not in have]


def provision_pubsub(res: Resources, log: Callable[[str], None]) -> None:
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    try:
        for topic in (res.topic, res.dead_letter_topic):
            _create(f"topic {topic}", lambda t=topic: publisher.create_topic(name=res.topic_path(t)), log)
        pairs = ((res.subscription, res.topic), (res.dead_letter_subscription_id, res.dead_letter_topic))
        for subscription, topic in pairs:
            _create(
                f"subscription {subscription} on {topic}",
                lambda s=subscription, t=topic: subscriber.create_subscription(
                    request={"name": res.subscription_path(s), "topic": res.topic_path(t), "ack_deadline_seconds": 60}
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
    res: Resources, create_instance: bool, instance_config: str, log: Callable[[str], None]
) -> None:
    client = spanner.Client(project=res.project)
    instance = client.instance(res.instance)
    on_emulator = bool(os.environ.get("SPANNER_EMULATOR_HOST"))
    if not instance.exists():
        if not (on_emulator or create_instance):
            raise RuntimeError(
                f"Spanner instance {res.instance} does not exist in project {res.project}. Create it "
                "(gcloud spanner instances create ...) or pass --create-instance."
            )
        config = f"projects/{res.project}/instanceConfigs/{EMULATOR_INSTANCE_CONFIG if on_emulator else instance_config}"
        instance = client.instance(res.instance, configuration_name=config, display_name=res.instance, node_count=1)
        _create(f"Spanner instance {res.instance}", lambda: instance.create().result(OPERATION_TIMEOUT_S), log)
    else:
        log(f"exists  Spanner instance {res.instance}")

    wanted = schemas.ddl_statements()
    database = open_database(res.project, res.instance, res.database)
    if not database.exists():
        database = instance.database(res.database, ddl_statements=wanted)
        _create(f"database {res.database} with {len(wanted)} DDL statements",
                lambda: database.create().result(OPERATION_TIMEOUT_S), log)
        return
    database.reload()
    todo = missing_ddl(list(database.ddl_statements), wanted)
    if todo:
        database.update_ddl(todo).result(OPERATION_TIMEOUT_S)
        for statement in todo:
            log(f"created {ddl_object_name(statement)}")
    log(f"exists  database {res.database} ({len(wanted) - len(todo)} of {len(wanted)} schema objects were there)")


def provision(
    res: Resources,
    create_instance: bool = False,
    instance_config: str = DEFAULT_INSTANCE_CONFIG,
    log: Callable[[str], None] = print,
) -> None:
    """Creates whatever of `res` is missing; safe to run any number of times."""
    provision_pubsub(res, log)
    provision_spanner(res, create_instance, instance_config, log)
