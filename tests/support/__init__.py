"""What the tests share, one idea a module: the Spanner fault injector (faults.py), waiting on
conditions (polling.py), a steady publishing load (steady_load.py), fold runs and large-fold deltas
(fold_runs.py), streams and resources of a test's own (streams.py, resources.py), a Pub/Sub topic
audit (topic_audit.py), and the contract's inputs: the
table of valid and invalid events (contract_table.py), the corpus (corpus.py), publish and event
times (event_times.py), hostile-input strategies (hostile_input.py) and vote messages
(vote_messages.py); and the trending rankings by brute force from a ledger (trending_ledger.py).
Test modules import from here, never from each other."""
