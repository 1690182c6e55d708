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


_ROOTS: dict[str, str | None] = {}  # folder -> its git root, for `elsewhere`


def _root_of_folder(folder: str) -> str | None:
    # A plain dict rather than functools.lru_cache: this module is on the hook's import path.
    if folder not in _ROOTS:
        if len(_ROOTS) > 4096:
            _ROOTS.clear()
        _ROOTS[folder] = git_root(folder)
    return _ROOTS[folder]


def elsewhere(source: str, project: str) -> bool:
    """True when `source` is a file inside another project's git repository: a file's
    project is the repository it lives in, read from its path (cached per folder)."""
    if not os.path.isabs(source):
        return False  # memory:..., a conversation id: only their recorded project counts
    root = _root_of_folder(os.path.dirname(source))
    return root is not None and root != project
