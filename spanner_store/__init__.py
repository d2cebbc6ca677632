"""The Spanner storage model both sides share: every table, column and key (tables.py), the
client and its retries (database.py), what a commit costs (mutation_cost.py, commit_budget.py),
and the rows both sides read: the change log of delta commits (delta_commits.py), each commit's
risers (top_candidates.py), the unfolded deltas (unfolded.py) and the stored vote states
(vote_rows.py). Imports only `schemas` and the Spanner client; Beam-free.

Above it, two packages by audience, which never import each other: spanner_writes (what the
pipelines' workers run: the sinks' writes, the fold, the writer generations) and spanner_reads
(what apps and operators read: exact counts, top lists, hourly counts, views, health)."""
