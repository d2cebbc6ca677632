"""A local redis-server for the write-back baseline (bench/write_back_cache.py, bench/write_back.py).

Started like the emulators (upvotes/devtools/emulators.py): a process group of its own, ready only once it
answers a real command, stopped on the way out. It listens on a unix socket only (no TCP port:
loopback is not a boundary) in a private temporary directory (mode 0700), which also holds its
append-only file, so that a restart after a SIGKILL reloads what the durability mode kept.

Durability modes, one per row of the benchmark:
- `none`: no AOF and no RDB snapshots, as Memorystore for Redis' basic tier by default: a crash
  loses everything not yet flushed to Spanner.
- `aof_everysec`: every write is appended to the AOF before the reply, which fsyncs once a
  second: a process crash loses nothing (the page cache survives it); a machine crash loses up
  to about one second of writes (Redis' persistence documentation). A SIGKILL shows only the
  first; `LocalRedis.crash_machine` simulates the second by cutting the AOF's unsynced tail.
- `aof_always`: the AOF is fsynced before the reply (group commit): nothing acknowledged is lost.

Debian's `redis-server` package installs the binary (7.0 on bookworm); it need not run as a
service.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from upvotes.devtools.emulators import EmulatorError, is_alive, terminate_group

PACKAGE = "redis-server"
NONE, AOF_EVERYSEC, AOF_ALWAYS = "none", "aof_everysec", "aof_always"
DURABILITY_ARGS = {
    NONE: ("--appendonly", "no"),
    AOF_EVERYSEC: ("--appendonly", "yes", "--appendfsync", "everysec"),
    AOF_ALWAYS: ("--appendonly", "yes", "--appendfsync", "always"),
}
DURABILITY_MODES = tuple(DURABILITY_ARGS)
READY_TIMEOUT_S = 30.0
SOCKET_NAME = "redis.sock"  # a unix socket path must stay under 108 bytes: keep the directory short
AOF_DIR = "appendonlydir"  # Redis 7's multi-part AOF: a base file, incremental files and a manifest
# Under everysec, Redis postpones the AOF's write(2) while a background fsync is slow, by up to 2 s:
# how long crash_machine waits for the command it cuts at to be in the file.
AOF_WRITE_WAIT_S = 10.0


class RedisServerError(EmulatorError):
    """redis-server is missing, would not start, or would not answer."""


def redis_binary() -> str:
    """Path of redis-server; RedisServerError naming Debian's package if it is not installed."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RedisServerError(
            f"redis-server is not installed (not on PATH). Install Debian's {PACKAGE} package "
            f"(apt-get install {PACKAGE}); the benchmark starts its own server, so it need not run as a service."
        )
    return binary


class LocalRedis:
    """One redis-server in a temporary directory of its own, for the duration of a `with` block.

    `kill()` sends SIGKILL and reaps it; `crash_machine()` also drops what the mode had not
    fsynced; `start()` starts it again on the same socket and directory, reloading its AOF if the
    mode keeps one.
    """

    def __init__(self, durability: str, parent_dir: Path | None = None) -> None:
        if durability not in DURABILITY_ARGS:
            raise ValueError(f"unknown durability {durability!r}; choose from {', '.join(DURABILITY_MODES)}")
        self.durability = durability
        self._parent_dir = parent_dir
        self.directory: Path | None = None
        self._process: subprocess.Popen | None = None
        self.restarts = 0

    @property
    def _directory(self) -> Path:
        """Its directory, made when its `with` block starts."""
        assert self.directory is not None, "a LocalRedis runs in a `with` block"
        return self.directory

    @property
    def _server(self) -> subprocess.Popen:
        """The server process, once started."""
        assert self._process is not None, "the server was never started"
        return self._process

    @property
    def socket_path(self) -> str:
        return str(self._directory / SOCKET_NAME)

    @property
    def log_path(self) -> Path:
        return self._directory / "redis.log"

    @property
    def pid(self) -> int:
        return self._server.pid

    def client(self, **kwargs):
        """A redis-py client on the socket (hiredis parses the replies where installed)."""
        import redis

        return redis.Redis(unix_socket_path=self.socket_path, **kwargs)

    def __enter__(self) -> LocalRedis:
        self.directory = Path(tempfile.mkdtemp(prefix="redis-", dir=self._parent_dir))
        try:
            self.start()
        except BaseException:
            shutil.rmtree(self.directory, ignore_errors=True)
            raise
        return self

    def __exit__(self, *_) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self._directory, ignore_errors=True)

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Starts the server and waits until it answers PING (after loading its AOF, if any)."""
        command = [
            redis_binary(),
            "--port",
            "0",
            "--unixsocket",
            self.socket_path,
            "--unixsocketperm",
            "700",
            "--dir",
            str(self.directory),
            "--save",
            "",
            "--daemonize",
            "no",
            "--logfile",
            str(self.log_path),
            *DURABILITY_ARGS[self.durability],
        ]
        if self._process is not None:
            self.restarts += 1
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._wait_until_ready(timeout_s)

    def _wait_until_ready(self, timeout_s: float) -> None:
        import redis

        deadline = time.monotonic() + timeout_s
        last_error: Exception | None = None
        with contextlib.closing(self.client(socket_timeout=1.0)) as probe:
            while time.monotonic() < deadline:
                if self._server.poll() is not None:
                    raise RedisServerError(
                        f"redis-server exited with code {self._server.returncode} while "
                        f"starting; see its log {self.log_path}"
                    )
                try:
                    probe.ping()  # a server still loading its AOF answers LOADING, an error here
                    return
                except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as error:
                    last_error = error
                    time.sleep(0.02)
        self.stop()
        raise RedisServerError(
            f"redis-server did not answer on {self.socket_path} within {timeout_s:.0f} s "
            f"(last error: {last_error}); see its log {self.log_path}"
        )

    def kill(self) -> None:
        """SIGKILL, as a crash: no shutdown, no last AOF write. Reaped before returning."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._server.pid, signal.SIGKILL)
        self._server.wait()

    def crash_machine(self, unsynced_from: str | None) -> bool:
        """A machine crash: SIGKILL, then the AOF loses what the mode had not fsynced; returns
        whether it lost anything. With AOF everysec that is taken to be everything from the first
        command naming the key `unsynced_from` on (the worst case of the one-second window: the
        last fsync came just before it; None: the client waited for the fsync, WAITAOF); AOF
        always fsyncs before each reply, so it keeps all; without persistence nothing is kept
        anyway. A process SIGKILL alone keeps the page cache, so it cannot show this."""
        if self.durability != AOF_EVERYSEC or unsynced_from is None:
            self.kill()
            return False
        # The cut must find the command in the file: written (not fsynced) before the kill, as it
        # is at once unless a slow background fsync postponed the write (seen under load).
        key = unsynced_from.encode("utf-8")
        deadline = time.monotonic() + AOF_WRITE_WAIT_S
        while _aof_offset(self._directory / AOF_DIR, key) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        self.kill()
        _truncate_aof_at(self._directory / AOF_DIR, key)
        return True

    def stop(self) -> None:
        if self._process is not None and is_alive(self._process.pid):
            terminate_group(self._process.pid)
        if self._process is not None:
            self._process.wait()


def _truncate_aof_at(aof_dir: Path, key: bytes) -> None:
    """Cuts the AOF's last incremental file at the first command naming `key`, as a machine crash
    losing that tail would: on reload the server holds what it held just before that command."""
    found = _aof_offset(aof_dir, key)
    if found is None:
        raise RedisServerError(
            f"no command naming {key!r} in {_last_incremental(aof_dir)} (an AOF rewrite in between?)"
        )
    path, offset = found
    with open(path, "r+b") as aof:
        aof.truncate(offset)


def _last_incremental(aof_dir: Path) -> Path:
    manifest = (aof_dir / "appendonly.aof.manifest").read_text(encoding="utf-8").split("\n")
    return aof_dir / [line.split()[1] for line in manifest if line.endswith(" type i")][-1]


def _aof_offset(aof_dir: Path, key: bytes) -> tuple[Path, int] | None:
    """The AOF's last incremental file and the offset in it of the first command naming `key`, if any."""
    path = _last_incremental(aof_dir)
    data = path.read_bytes()
    offset = next((start for start, arguments in _aof_commands(data) if key in arguments), None)
    return None if offset is None else (path, offset)


def _aof_commands(data: bytes) -> Iterator[tuple[int, list[bytes]]]:
    """(offset, arguments) of each command of an AOF file (RESP arrays of bulk strings)."""
    offset = 0
    while offset < len(data):
        start = offset
        header_end = data.index(b"\r\n", offset)
        count, offset = int(data[offset + 1 : header_end]), header_end + 2
        arguments = []
        for _ in range(count):
            length_end = data.index(b"\r\n", offset)
            length = int(data[offset + 1 : length_end])
            arguments.append(data[length_end + 2 : length_end + 2 + length])
            offset = length_end + 2 + length + 2
        yield start, arguments
