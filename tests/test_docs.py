"""The documentation site builds with `mkdocs build --strict`, as `make docs` runs it: a broken link
or anchor, a page missing from the nav, a missing include or an API object mkdocstrings cannot find
fails. The generated parts come from the code they describe."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_the_site_builds_strictly_with_the_generated_parts(tmp_path: Path) -> None:
    site = tmp_path / "site"
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, built.stderr[-4000:]
    assert "WARNING" not in built.stderr, built.stderr
    contract = text_of((site / "contract" / "index.html").read_text(encoding="utf-8"))
    schema = json.loads((REPO / "schemas" / "vote_event.schema.json").read_text(encoding="utf-8"))
    for field in schema["properties"]:
        assert f" {field} " in contract, field
    assert "generated:" not in contract and "zero_delta" in contract and "bad_event_time" in contract
    api = text_of((site / "api" / "index.html").read_text(encoding="utf-8"))
    for name in ("CountsReader", "get_many", "exact_counts", "top_posts", "verify_totals"):
        assert name in api, name
    assert (site / "assets" / "benchmarks.png").read_bytes() == (REPO / "bench" / "results" / "latest.png").read_bytes()
    benchmarks = (site / "benchmarks" / "index.html").read_text(encoding="utf-8")
    assert "assets/benchmarks.png" in benchmarks and "Benchmark results" in benchmarks
    assert "Least-privilege IAM" in (site / "deploying" / "index.html").read_text(encoding="utf-8")


def test_every_page_is_in_the_nav_and_linked_from_the_readme() -> None:
    nav = re.findall(r"^  - [^:]+: (\S+\.md)$", (REPO / "mkdocs.yml").read_text(encoding="utf-8"), re.M)
    pages = sorted(p.name for p in (REPO / "docs").glob("*.md"))
    assert sorted(nav) == pages
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for page in pages:
        if page != "index.md":
            assert f"(docs/{page})" in readme, page
    assert len(readme.splitlines()) <= 200
