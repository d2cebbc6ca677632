"""The bearer token(s) `upvotes serve` requires for writes: from `--token-file`, else from
$UPVOTES_WRITE_TOKEN, else generated at start.

A generated token is 256 random bits (`secrets.token_urlsafe(32)`), written to a file that
only its owner can read (mode 0600, in a 0700 directory, written whole under a temporary
name and renamed, so it is never readable by others nor seen half-written), and printed
once by the caller. Each start generates a new one: restarting rotates it.

A token file may hold several tokens, one a line: all are accepted. That is how a token is
rotated without refusing any app server (docs/security.md): add the new one, restart, move
the app servers over, remove the old one, restart.
"""

from __future__ import annotations

import os
import secrets
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from upvotes.serving.serve_settings import TOKEN_ENV

GENERATED_TOKEN_FILE = Path(".upvotes") / "serve-token"


class CredentialError(ValueError):
    """A token file that cannot be used; the message says what to do."""


@dataclass(frozen=True)
class WriteCredential:
    tokens: tuple[str, ...]
    source: str  # where they came from, for the start-up line
    generated_file: Path | None = None  # set when generated at this start


def tokens_in(text: str) -> tuple[str, ...]:
    return tuple(line.strip() for line in text.splitlines() if line.strip())


def write_token_file(path: Path, token: str) -> None:
    """Writes `token` to `path`, readable and writable by its owner only."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(descriptor, 0o600)  # whatever the umask
        os.write(descriptor, (token + "\n").encode("ascii"))
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    os.replace(temporary, path)


def resolve_write_credential(
    token_file: Path | None, environ: Mapping[str, str] = os.environ, generated_file: Path = GENERATED_TOKEN_FILE
) -> WriteCredential:
    """The configured tokens, or a new generated one written to `generated_file`."""
    if token_file is not None:
        try:
            mode = token_file.stat().st_mode
            tokens = tokens_in(token_file.read_text(encoding="utf-8"))
        except OSError as error:
            raise CredentialError(f"cannot read --token-file {token_file}: {error.strerror}") from None
        if not tokens:
            raise CredentialError(f"--token-file {token_file} is empty")
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            print(
                f"upvotes serve: warning: --token-file {token_file} is readable by other users; chmod 600 {token_file}",
                file=sys.stderr,
            )
        return WriteCredential(tokens, f"--token-file {token_file}")
    tokens = tokens_in(environ.get(TOKEN_ENV, ""))
    if tokens:
        return WriteCredential(tokens, f"${TOKEN_ENV}")
    token = secrets.token_urlsafe(32)
    write_token_file(generated_file, token)
    return WriteCredential((token,), f"generated, in {generated_file}, mode 0600", generated_file)
