"""The HTTP service app servers call (`upvotes serve`) and its live page: the app, its
settings, credentials, guards, sessions and rate limits."""
