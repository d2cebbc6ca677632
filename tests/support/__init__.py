"""What the tests share: the Spanner fault injector (faults.py), waiting on conditions
(polling.py), a steady publishing load (steady_load.py), fold runs (fold_runs.py), stream and
resource helpers (streams.py, resources.py), a Pub/Sub topic audit (topic_audit.py) and the
Beam graph cache (beam_graph_cache.py). Test modules import from here, never from each other."""
