"""What the pipelines' workers write to Spanner: the delta sink's blind inserts (deltas.py), the
vote-state sink's transactions (votes.py), the writer generations (writers.py) and the fold
(folding.py). Shipped in the worker image whole; never imports the read side (spanner_reads)."""
