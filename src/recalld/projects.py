"""What project a folder belongs to: its git root, or the folder itself (issue 21).

Kept free of heavy imports: the agent hook (`recalld.hooks`) calls it on every prompt.
"""

from __future__ import annotations

import os


def git_root(path: str) -> str | None:
    """The nearest folder at or above `path` that holds `.git` (a folder, or the file of a
    worktree or submodule), or None."""
    current = os.path.abspath(path)
    if not os.path.isdir(current):
        current = os.path.dirname(current)
    while True:
        if os.path.exists(os.path.join(current, ".git")):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def project_of(folder: str) -> str:
    """The project of a working folder: its git root, or the folder itself (absolute)."""
    return git_root(folder) or os.path.abspath(folder)
