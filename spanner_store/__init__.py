"""The Spanner data layer: every table, column and SQL statement of the system, and the
transactions over them (delta writes, folds, exact and hourly reads, versioned views).
Imports only `schemas` and the Spanner client; Beam-free."""
