"""Deprecated (removed in 0.2.0, CHANGELOG.md): moved to spanner_reads.reads, and the checks
against a ledger to upvotes.devtools.verification. The imports below are real, so the import
contracts see them (.importlinter names each as a deprecated forwarder); only an old caller
imports this module, never a worker."""

from spanner_reads import reads
from spanner_store.moved import forward
from upvotes.devtools import verification

__getattr__ = forward(
    __name__,
    {
        **dict.fromkeys(("exact_counts", "counts_in_snapshot", "top_posts", "TopPosts"), reads),
        **dict.fromkeys(("verify_totals", "verify_unique_voters", "Mismatch"), verification),
    },
)
