"""The `upvotes` command and everything around the pipelines, in rooms by job:

- `cli` and `commands/`: the subcommands (`upvotes --help`);
- `serving/`: the HTTP service and its live page;
- `operations/`: operator tools (status, backlog, dead letters, capacity);
- `deploy/`: template metadata, gcloud steps, deploy config, monitoring;
- `devtools/`: emulators, provisioning, workloads, publisher and ledger, the race and its
  baselines, the commit meter and mutation counting.

None of it ships to the Beam workers (.importlinter, tests/test_templates.py).
"""
