"""The built-in envs by id (single-agent, best-of-n, user-sim)."""
