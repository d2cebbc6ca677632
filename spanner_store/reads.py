"""Deprecated: moved to spanner_reads.reads (and the checks to upvotes.devtools.verification)."""
from spanner_store.moved import forward

__getattr__ = forward(__name__, {
    **dict.fromkeys(("exact_counts", "counts_in_snapshot", "top_posts", "TopPosts"), "spanner_reads.reads"),
    **dict.fromkeys(("verify_totals", "verify_unique_voters", "Mismatch"), "upvotes.devtools.verification"),
})
