"""Flags that several subcommands share, one module per group: the database's (`database`), the
pipelines' from the parameter table (`pipeline`), and an audited change's (`moderation`). The
subcommands in upvotes/commands/ add them; nothing here runs anything."""
