"""`upvotes provision`: topics, subscriptions, the Spanner instance (emulator) and database."""

from __future__ import annotations

import argparse

from upvotes.flags.database import add_database_arguments

HELP = "Create the topics, subscriptions, Spanner instance (emulator) and database; idempotent."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pipeline.params import HOT_HALF_LIFE_HOURS
    from upvotes.operations.provision import DEFAULT_INSTANCE_CONFIG

    add_database_arguments(parser)
    parser.add_argument("--topic", required=True, help="Pub/Sub topic the publishers send votes to")
    parser.add_argument("--subscription", required=True, help="subscription the streaming pipeline reads")
    parser.add_argument("--dead-letter-topic", required=True, help="topic for rejected messages")
    parser.add_argument(
        "--dead-letter-subscription", help="subscription that keeps dead letters (default: <dead-letter-topic>-kept)"
    )
    parser.add_argument(
        "--create-instance", action="store_true", help="on a real project, create the Spanner instance if missing"
    )
    parser.add_argument(
        "--instance-config", default=DEFAULT_INSTANCE_CONFIG, help="instance configuration for --create-instance"
    )
    assert HOT_HALF_LIFE_HOURS.default is not None  # an optional parameter
    parser.add_argument(
        f"--{HOT_HALF_LIFE_HOURS.flag}",
        type=HOT_HALF_LIFE_HOURS.parse,
        default=HOT_HALF_LIFE_HOURS.kind(HOT_HALF_LIFE_HOURS.default),
        help=HOT_HALF_LIFE_HOURS.help,
    )
    parser.add_argument(
        "--recompute-hot",
        action="store_true",
        help="record --hot-half-life-hours even if the database has another, and recompute "
        "every post's hot score with it (hot reads are not certified until it ends)",
    )


def run(args: argparse.Namespace) -> int:
    from upvotes.operations.provision import provision
    from upvotes.resources import Resources

    resources = Resources(
        args.project,
        args.instance,
        args.database,
        args.topic,
        args.subscription,
        args.dead_letter_topic,
        args.dead_letter_subscription or "",
    )
    provision(
        resources,
        create_instance=args.create_instance,
        instance_config=args.instance_config,
        hot_half_life_hours=args.hot_half_life_hours,
        recompute_hot=args.recompute_hot,
    )
    return 0
