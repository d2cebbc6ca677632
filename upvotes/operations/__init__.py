"""Operator tools: the health status, the Pub/Sub backlog, dead-letter re-drive and the
capacity model. Moderation's storage side is upvotes/operations/moderation.py."""
