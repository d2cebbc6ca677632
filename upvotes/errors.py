"""Readable one-line explanations of the errors a user can fix, for the CLI."""
from __future__ import annotations

import os

from google.api_core import exceptions
from google.auth.exceptions import DefaultCredentialsError

from pipeline.params import InvalidParameter
from upvotes.emulators import EmulatorError

START_EMULATORS = 'start the emulators with: eval "$(upvotes emulators start)"'


def explain(error: BaseException) -> str:
    """What went wrong and what to do about it."""
    if isinstance(error, (InvalidParameter, EmulatorError)):
        return str(error)
    if isinstance(error, DefaultCredentialsError):
        return ("no Google Cloud credentials found. Locally, " + START_EMULATORS +
                "; on Google Cloud, run: gcloud auth application-default login")
    if isinstance(error, exceptions.ServiceUnavailable):
        emulator = os.environ.get("SPANNER_EMULATOR_HOST") or os.environ.get("PUBSUB_EMULATOR_HOST")
        where = f" (emulator at {emulator})" if emulator else ""
        return f"the service is unavailable{where}: {error.message}. Is it running? Locally, {START_EMULATORS}"
    if isinstance(error, exceptions.NotFound):
        return f"not found: {error.message}. Create the resources first with `upvotes provision ...`"
    if isinstance(error, exceptions.GoogleAPICallError):
        return f"{type(error).__name__}: {error.message}"
    return f"{type(error).__name__}: {error}"
