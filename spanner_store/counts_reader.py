"""Deprecated: moved to spanner_reads.counts_reader."""
from spanner_store.moved import forward

__getattr__ = forward(__name__, dict.fromkeys(("CountsReader", "PostCount"), "spanner_reads.counts_reader"))
