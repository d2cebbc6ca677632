"""Operational side of the upvotes system: emulators, provisioning, publishing, reads, CLI."""
