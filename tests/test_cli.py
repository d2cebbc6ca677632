"""The `upvotes` command: help on every subcommand, readable errors, emulator state handling."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from schemas.contract import parse_vote
from schemas.records import PostUser, VoteState
from spanner_writes.votes import apply_all_vote_states
from upvotes.cli import build_parser, main


def subcommands() -> list[str]:
    """Every subcommand, as the parser knows them (not a hand copy, which goes stale)."""
    (choices,) = [
        action.choices for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction)
    ]
    return sorted(choices)


SUBCOMMANDS = subcommands()


def test_the_parser_has_the_subcommands_the_readme_walks_through() -> None:
    # A floor, so that a parser that lost its subparsers cannot pass the tests below vacuously.
    assert {
        "emulators",
        "provision",
        "publish",
        "stream",
        "fold",
        "read",
        "top",
        "serve",
        "status",
        "demo",
        "suspend-users",
        "restore-users",
        "suspensions",
        "suspects",
    } <= set(SUBCOMMANDS)


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_subcommand_has_help(command: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: upvotes " + command)
    assert len(out.splitlines()) > 3


def test_top_level_help_lists_every_subcommand() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "upvotes.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for command in SUBCOMMANDS:
        assert command in out


def test_an_invalid_parameter_is_one_readable_line_and_exit_1(capsys) -> None:
    code = main(["fold", "--project", "demo-project", "--instance", "Bad Instance!", "--database", "votes"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("upvotes: --instance='Bad Instance!' is not valid") and "Traceback" not in err


def test_unknown_arguments_are_refused_outside_the_pipelines(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["read", "--project", "p", "--instance", "i", "--database", "d", "p-1", "--bogus"])
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_a_missing_emulator_names_the_package_to_install(tmp_path) -> None:
    from upvotes.devtools.emulators import PACKAGES, EmulatorError, emulator_binary

    for name, package in PACKAGES.items():
        with pytest.raises(EmulatorError, match=package):
            emulator_binary(name, sdk_root=tmp_path)


def test_read_user_prints_the_users_vote_on_each_post(stack, database, capsys) -> None:
    event = b'{"post_id": "cli/p", "user_id": "cli user", "vote": "up", "event_time": "2026-11-22T10:00:00Z"}'
    state = parse_vote(event, None, 0.0)
    assert isinstance(state, VoteState), state
    assert apply_all_vote_states(database, {PostUser(state.post_id, state.user_id): state.latest()}).applied == 1
    flags = ["read", f"--project={stack.project}", f"--instance={stack.instance}", f"--database={stack.database}"]
    assert main([*flags, "--user", "cli user", "cli/p", "never-voted"]) == 0
    voted, never = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert voted["applied_at"].startswith("20")
    assert voted | {"applied_at": None} == {
        "post_id": "cli/p",
        "user_id": "cli user",
        "vote": "up",
        "voted_at": "2026-11-22T10:00:00+00:00",
        "event_id": None,
        "applied_at": None,
    }
    assert never == {
        "post_id": "never-voted",
        "user_id": "cli user",
        "vote": "none",
        "voted_at": None,
        "event_id": None,
        "applied_at": None,
    }
    assert main([*flags, "--user", "cli user", "--hourly", "cli/p"]) == 2
    assert "--user prints votes" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main([*flags, "--user", "u" * 129, "cli/p"])
    assert exit_info.value.code == 2 and "1 to 128 characters" in capsys.readouterr().err
