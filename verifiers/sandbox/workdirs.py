"""Host-side helpers for sandbox work folders: how much disk one uses, and deleting one."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

__all__ = ["remove_tree", "work_dir_exceeds"]


def work_dir_exceeds(path: Path, max_bytes: int, max_entries: int = 100_000) -> bool:
    """Whether the files under ``path`` use more than ``max_bytes`` of disk (or more than
    ``max_entries`` entries, which would also make this walk itself slow). Links are not followed."""
    used = 0
    entries = 0
    stack = [str(path)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    entries += 1
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    used += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    if used > max_bytes or entries > max_entries:
                        return True
        except OSError:
            continue
    return False


def remove_tree(path: Path) -> None:
    """Delete ``path`` however deep or odd what the sandbox left there (links are never followed)."""
    for attempt in range(2):
        try:
            shutil.rmtree(path, ignore_errors=True)
        except RecursionError:
            break  # folders nested past Python's recursion limit (the sandbox made them)
        if not path.exists():
            return
        if attempt == 0:  # a process of the run was still writing; it is dead now
            time.sleep(0.05)
    if path.exists():  # rm walks any depth without recursing, and never follows a link
        subprocess.run(["rm", "-rf", "--", str(path)], stdin=subprocess.DEVNULL, capture_output=True, check=False)
