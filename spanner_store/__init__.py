"""The Spanner data layer: opening the database, every table name and key, writes, folds and reads."""
