"""The `upvotes` subcommands, one module each, in the order `upvotes --help` lists them.

Every module has HELP (one line), `add_arguments(parser)` and `run(args) -> int`. A module
imports what it runs (Beam, the Spanner client) inside `run`, so `--help` stays quick.
Errors are raised, not printed: `upvotes.cli.main` reports each in one line.
"""

from __future__ import annotations

COMMANDS = (
    "emulators",
    "provision",
    "publish",
    "stream",
    "fold",
    "read",
    "top",
    "publish-top-view",
    "verify",
    "capacity",
    "status",
    "dead-letters",
    "adjust",
    "reset",
    "forget-user",
    "suspend-users",
    "restore-users",
    "suspensions",
    "suspects",
    "serve",
    "demo",
    "lint-schema",
    "deploy",
)


def module_name(command: str) -> str:
    return f"upvotes.commands.{command.replace('-', '_')}"
