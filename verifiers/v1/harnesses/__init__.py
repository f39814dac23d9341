"""The built-in harnesses, by id (``null``, ``bash``); see ``verifiers.v1.harness``."""
