"""The corpus of malformed messages (tests/corpus/, written by make_corpus.py): where its files
are, their expected outcomes (expected.json), its generator, the attributes each file is sent
with, and the publish time its messages (and the other hostile-input tests') are parsed at.

tests/test_bad_input.py pins each file's outcome; tests/test_contract.py holds the JSON Schema
to the parser on it; tests/test_parse_and_sum.py runs it through sum_message and ParseVotes.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from schemas.contract import FORMAT_ATTRIBUTE

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
CORPUS_PUBLISHED = 1_795_309_323.0  # 2026-11-22T01:02:03Z: stands in for a missing event_time


def load_make_corpus():
    """tests/corpus/make_corpus.py, as a module (it is a script, not a package's module)."""
    spec = importlib.util.spec_from_file_location("make_corpus", CORPUS / "make_corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def manifest() -> dict[str, str]:
    """{file name: expected outcome}, from expected.json."""
    return json.loads((CORPUS / "expected.json").read_text(encoding="utf-8"))


def corpus_attributes(name: str) -> dict[str, str]:
    """The attributes a corpus file is sent with: batches carry their `format`."""
    if name.endswith(".ndjson"):
        return {"event_id": "b-corpus", FORMAT_ATTRIBUTE: load_make_corpus().format_of(name)}
    return {"event_id": "e-corpus"}
