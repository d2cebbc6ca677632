"""Deprecated (removed in 0.2.0, CHANGELOG.md): moved to spanner_reads.counts_reader. A real
import, seen by the import contracts (.importlinter)."""

from spanner_reads import counts_reader
from spanner_store.moved import forward

__getattr__ = forward(__name__, dict.fromkeys(("CountsReader", "PostCount"), counts_reader))
