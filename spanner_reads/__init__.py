"""What apps and operators read from Spanner: exact counts and top posts (reads.py), the cached
reader for app servers (counts_reader.py), the certified fresh top (fresh_top.py), hourly counts
(hourly.py), "my vote" (my_votes.py), versioned top-posts views (views.py), and the health and
liveness `upvotes status` reports (health.py, liveness.py). Not in the worker image; never
imports the workers' side (spanner_writes)."""
