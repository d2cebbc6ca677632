"""The one way the `upvotes` command reports an error: one readable line saying what to do.

Subcommands raise; `upvotes.cli.main` catches, prints `upvotes: <explain(error)>` on stderr
and exits 2 for a UsageError (input the user can fix before anything ran) and 1 for anything
else. UPVOTES_DEBUG=1 re-raises, for the traceback.
"""

from __future__ import annotations

import os

from google.api_core import exceptions
from google.auth.exceptions import DefaultCredentialsError

from local_runner.message_log import LogBusy, LogMismatch
from pipeline.params import InvalidParameter
from spanner_reads.rankings.ranking import RankingUnavailable
from spanner_reads.views import ViewError
from spanner_store.database import is_transient
from upvotes.devtools.emulators import EmulatorError

START_EMULATORS = 'start the emulators with: eval "$(upvotes emulators start)"'


class UsageError(Exception):
    """Something the user can fix in how they called the command; exit status 2."""


def explain(error: BaseException) -> str:
    """What went wrong and what to do about it."""
    if isinstance(
        error, (UsageError, InvalidParameter, EmulatorError, ViewError, RankingUnavailable, LogBusy, LogMismatch)
    ):
        return str(error)
    if isinstance(error, DefaultCredentialsError):
        return (
            "no Google Cloud credentials found. Locally, "
            + START_EMULATORS
            + "; on Google Cloud, run: gcloud auth application-default login"
        )
    if isinstance(error, exceptions.RetryError) and error.cause is not None:  # the client's own retry gave up
        return explain(error.cause)
    if isinstance(error, exceptions.ServiceUnavailable):
        emulator = os.environ.get("SPANNER_EMULATOR_HOST") or os.environ.get("PUBSUB_EMULATOR_HOST")
        where = f" (emulator at {emulator})" if emulator else ""
        return f"the service is unavailable{where}: {error.message}. Is it running? Locally, {START_EMULATORS}"
    if isinstance(error, exceptions.NotFound) and is_transient(error):  # "Session not found": not a resource
        return f"Spanner dropped the session: {error.message}. It was retried until its deadline; run it again"
    if isinstance(error, exceptions.NotFound):
        return f"not found: {error.message}. Create the resources first with `upvotes provision ...`"
    if isinstance(error, exceptions.GoogleAPICallError):
        return f"{type(error).__name__}: {error.message}"
    return f"{type(error).__name__}: {error}"


def exit_status(error: BaseException) -> int:
    return 2 if isinstance(error, (UsageError, LogBusy, LogMismatch)) else 1


def debugging() -> bool:
    return bool(os.environ.get("UPVOTES_DEBUG"))
