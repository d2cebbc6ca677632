"""`upvotes deploy ACTION`: the Google Cloud deployment as printable gcloud commands."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TextIO

from pipeline.params import InvalidParameter
from upvotes.command_errors import UsageError
from upvotes.deploy.deploy_config import REPO_ROOT, DeployConfig, environment_help
from upvotes.deploy.gcloud_steps import ACTIONS, execute_steps, print_steps, steps_for
from upvotes.deploy.template_metadata import parameter_table_markdown, stale_files, write_metadata

HELP = "Dataflow flex templates, launch commands, scheduler job and IAM for Google Cloud."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        choices=ACTIONS,
        help="metadata: write templates/*/metadata.json and the parameter tables; "
        "setup, provision, iam, build, run, schedule: that stage; all: every stage in order; "
        "alerts: the Cloud Monitoring alert policies and dashboard (templates/monitoring)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the exact commands, one per line, and run nothing"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="with metadata: write nothing; exit 1 if a generated file on disk is out of date",
    )
    parser.add_argument(
        "--markdown", action="store_true", help="with metadata: print the CLI flag / template parameter table and exit"
    )
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = environment_help() + "\n\nStep by step from an empty project: templates/README.md"


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    root: Path = args.root
    if args.action == "metadata":
        if args.markdown:
            out.write(parameter_table_markdown())
            return 0
        if args.check:
            stale = stale_files(root)
            for path in stale:
                print(f"out of date: {path} (run `upvotes deploy metadata`)", file=err)
            return 1 if stale else 0
        for path in write_metadata(root) if not args.dry_run else stale_files(root):
            print(f"{'would write' if args.dry_run else 'wrote'} {path}", file=out)
        return 0

    try:
        cfg = DeployConfig.from_env().validate()
    except InvalidParameter as error:
        raise UsageError(str(error)) from None
    if args.action in ("build", "all"):
        stale = stale_files(root)
        if stale:
            print(
                "upvotes: the template metadata is out of date; run `upvotes deploy metadata` first: "
                + ", ".join(str(p) for p in stale),
                file=err,
            )
            if not args.dry_run:
                return 1
    if args.action == "alerts":
        from upvotes.deploy.monitoring import alert_steps, write_rendered

        for path in write_rendered(cfg, root):  # local files only; the commands below read them
            print(f"# rendered {path}", file=out)
        steps = alert_steps(cfg)
    else:
        steps = steps_for(args.action, cfg)
    if args.dry_run:
        print(f"# from the repository root: cd {shlex.quote(str(root))}", file=out)
        print_steps(steps, out)
        return 0
    return execute_steps(steps, out, err, cwd=root)
