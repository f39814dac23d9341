"""The built-in tasksets, by id (``harbor``); see ``verifiers.v1.plugins``."""
