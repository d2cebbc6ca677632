"""Resources of a test's own: unique names for a database, topics and subscriptions, and the
window of the streams the tests start."""

from __future__ import annotations

import uuid

from upvotes.resources import Resources

PROJECT = "test-project"
STREAM_WINDOW_S = 2  # the window of the streams `streaming_stack` starts


def new_resources(prefix: str = "t") -> Resources:
    """Unique names, so every caller gets its own database, topics and subscriptions."""
    tag = uuid.uuid4().hex[:8]
    return Resources(
        project=PROJECT,
        instance="test-instance",
        database=f"{prefix}-{tag}"[:30],
        topic=f"votes-{tag}",
        subscription=f"votes-sub-{tag}",
        dead_letter_topic=f"votes-dl-{tag}",
    )
