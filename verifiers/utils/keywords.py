"""Classic home of the constructor-keyword rules; they live in :mod:`verifiers.classic.keywords`."""

from verifiers.classic.keywords import CLASSIC_ENVIRONMENT_KEYWORDS, CLASSIC_RUN_KEYWORDS, accept_keywords

__all__ = ["CLASSIC_ENVIRONMENT_KEYWORDS", "CLASSIC_RUN_KEYWORDS", "accept_keywords"]
