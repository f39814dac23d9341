"""The built-in harnesses, by id (``null``, ``bash``, ``mini_swe_agent``); see ``verifiers.v1.harness``."""
