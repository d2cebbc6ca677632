"""The `upvotes` command and everything around the pipelines, in rooms by job:

- `cli` and `commands/`: the subcommands (`upvotes --help`), each parsing its arguments and
  printing what the work returns; `flags/`: the flags several share; `command_errors`: how an
  error becomes one line and an exit status;
- `serving/`: the HTTP service and its live page;
- `demo/`: the demo's steps, one module each;
- `operations/`: the work of the operator commands (provision, status, backlog, dead letters,
  capacity, moderation, erasure, suspensions), which the commands call and print;
- `deploy/`: template metadata, gcloud steps, deploy config, monitoring;
- `devtools/`: emulators, provisioning, workloads, publisher and ledger, the race and its
  baselines, the commit meter and mutation counting.

None of it ships to the Beam workers (.importlinter, tests/test_templates.py).
"""
