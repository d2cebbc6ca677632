"""The local runner: what running the streaming pipeline on Beam's DirectRunner (`upvotes stream`
on the emulators) takes beyond the pipeline itself. Never in the worker image, and never imported
by the worker packages (.importlinter): Dataflow needs none of it.

- streaming.py: runs the streaming pipeline from this process, on the DirectRunner with the
  evaluators below installed, until drained;
- drain.py: SIGINT and SIGTERM drain a local run (StopOnSignals, DrainReport);
- pubsub_reader.py: the project's Pub/Sub reader (big pulls, no idle stall, a drain);
- exactly_once.py, message_log.py: what the reader holds and when it acknowledges: only once
  everything derived from a message is committed, its pulls logged so that a restart after a kill
  replays them into the same panes (exactly once under SIGKILL);
- heartbeat.py: the stream's heartbeat row, so that `upvotes status` sees a dead stream;
- window_state.py: fired windows' state freed (and TESTED_BEAM_VERSION, the Beam the private
  hooks are written for);
- metrics.py: the user counters, read where Beam's streaming DirectRunner really keeps them.
- dofn_specs.py, option_views.py, signatures.py: what Beam works out again for every pipeline and
  bundle (a DoFn's state specs, the options' views, a function's parameters), worked out once
  (streaming.py's `install_beam_caches`, also installed by the tests).

pubsub_reader.py, window_state.py and the three caches patch private Beam internals (see their
docstrings).
"""
