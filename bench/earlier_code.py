"""An earlier commit's tree, extracted with `git archive`, for a benchmark to run beside this code in
the same run (a same-run "before"): trending's sink and fold before issue 36, real_traffic's stream
before issue 45, a suspension before users moved whole (issue 46)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def earlier_tree(commit: str, paths: Sequence[str] = ()) -> Iterator[Path | None]:
    """`commit`'s tree (only `paths`, when given) in a temporary directory for the block: run its
    code from there (`python -m` imports the packages of its working directory first). None when
    this checkout cannot give it (no git, or a shallow clone without the commit); the temporary
    directory's other files (beside the tree) are the caller's."""
    with tempfile.TemporaryDirectory(prefix=f"bench-{commit}-") as work:
        try:
            archive = subprocess.run(
                ["git", "archive", "--format=tar", commit, *paths],
                cwd=REPO,
                capture_output=True,
                check=True,
                timeout=120,
            )
        except (OSError, subprocess.SubprocessError):
            yield None
            return
        tree = Path(work) / "tree"
        tree.mkdir()
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(tree, filter="data")
        yield tree


def run_script_in(tree: Path, script: Path, spec: dict, what: str, timeout_s: float) -> dict:
    """Runs `script` (a file of bench/fixtures/, copied into `tree`) with `tree` first on the path,
    so its imports are that commit's code: `python SCRIPT SPEC.json OUT.json`, `spec` written as
    SPEC; returns what it wrote to OUT. Raises RuntimeError (naming `what`) when it fails."""
    copied = tree / script.name
    shutil.copy(script, copied)
    spec_path, out_path = tree.parent / "spec.json", tree.parent / "out.json"
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(copied), str(spec_path), str(out_path)],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "PYTHONPATH": str(tree)},
    )
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed: {done.stderr[-3000:]}")
    return json.loads(out_path.read_text(encoding="utf-8"))
