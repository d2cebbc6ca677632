"""Developer tools, never shipped to the workers: the emulators, provisioning, generated
workloads, the publisher and its ledger, the race against read-modify-write and its
baselines (Redis write-back, counter rows), the commit meter and its mutation counting,
the local stream, the schema linter and progress bars."""
