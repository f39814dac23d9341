"""Helpers for harness plugins, at the original's module path: ``launch`` (the shared chat
program, ``CHAT_PROGRAM_SOURCE`` and ``launch_chat_program``) and ``compaction``."""
