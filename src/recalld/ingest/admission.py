"""What may enter the store from a folder: ignore files, exclude patterns, the deny-list of
secret-bearing files, and symlinks that stay inside a watched folder (issue 16).

A `Scope` holds the rules of one walk or one watched folder. Checking a path costs a few
pattern matches; the ignore files of each folder are read once and cached until they change.

- **Ignore files**: `.gitignore`, `.ignore` and `.recalldignore` in the root and in every
  folder below it, with git's semantics (a nested file's patterns are relative to its folder,
  later and deeper patterns win, `!` re-includes; a file inside an ignored folder stays out),
  matched by `pathspec`'s `GitIgnoreSpec`. When the root lies inside a git repository (a
  watched subfolder), the ignore files of every folder from the repository's root down to it
  apply too, each relative to its own folder, as git applies them; the search for the
  repository stops at the user's home (a dotfiles repository there is not the project) and
  never crosses into another repository. If those rules would ignore the root itself, the user
  chose an ignored folder on purpose and only its own ignore files apply.
- **Exclude patterns**: `privacy.exclude` in the config, a source's own `exclude`, and an
  ingest request's `exclude`, gitignore-style, relative to the root; they win over ignore files.
- **Deny-list**: files that hold credentials by their very name, matched against the whole
  path (and a symlink's target), so a watched `~/.ssh` stays out too. Explicitly named files
  bypass ignore files and excludes but never the deny-list, unless the request allows secrets.
- **Forgotten paths** (`recalld forget PATH`, `ingest.forgotten`): checked first, by every
  walk, every changed path and every explicit request, so a forgotten file stays out.
- **Symlinks** (`privacy.symlinks`): `inside` follows a link only when its target is inside a
  watched folder (or the folder being ingested), `never` skips every link, `all` follows all.
  Symlinked folders are never descended (loops).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pathspec

from recalld.config import PrivacySettings, SymlinkPolicy
from recalld.errors import ConfigError
from recalld.ingest.forgotten import ForgottenPaths
from recalld.safe_io import open_regular

logger = logging.getLogger(__name__)

IGNORE_FILES = (".gitignore", ".ignore", ".recalldignore")
SYMLINK_POLICIES: tuple[str, ...] = typing.get_args(SymlinkPolicy)

# Files that hold credentials by name. Drawn from gitleaks' and GitHub secret scanning's
# lists of sensitive file names and the credential files of common tools; matched
# gitignore-style against the whole path.
DENY_PATTERNS = (
    # Environment files: `.env`, `.env.local`, `.env.production`, ...
    ".env",
    ".env.*",
    "*.env",
    # SSH and GnuPG material, whole folders.
    ".ssh/",
    ".gnupg/",
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    "id_ecdsa_sk",
    "id_ed25519_sk",
    "*_rsa",
    "*_dsa",
    "*_ecdsa",
    "*_ed25519",
    # Keys, certificates with keys, keystores, password databases, keychains.
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "*.kdbx",
    "*.keychain",
    "*.keychain-db",
    "*.asc",
    "*.gpg",
    "secring.*",
    # Cloud and tool credentials.
    ".aws/credentials",
    ".aws/config",
    ".azure/",
    ".config/gcloud/",
    ".kube/config",
    ".docker/config.json",
    ".netrc",
    "_netrc",
    ".pgpass",
    ".my.cnf",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".htpasswd",
    "credentials.json",
    "*.tfstate",
    "*.tfstate.backup",
    # Shell and REPL histories.
    ".*_history",
    "fish_history",
    ".histfile",
    # Version-control internals (objects, hooks, config with remote tokens).
    ".git/",
    ".hg/",
    ".svn/",
)


class Matcher:
    """Gitignore-style patterns (`pathspec.GitIgnoreSpec`) with a one-regex pre-check.

    Most paths match no pattern at all; one combined regex says so in one step instead of one
    per pattern (a 60-pattern list: ~60 µs a path otherwise, which a 100k-file scan feels).
    """

    def __init__(self, lines: Iterable[str]) -> None:
        self.spec = pathspec.GitIgnoreSpec.from_lines(lines)
        self._any = _combined(self.spec)

    def __len__(self) -> int:
        return len(self.spec)

    def check(self, relative: str) -> bool | None:
        """True: ignored; False: re-included by a `!` pattern; None: no pattern matches."""
        if self._any is not None and self._any.search(relative) is None:
            return None
        return self.spec.check_file(relative).include


def _combined(spec: pathspec.GitIgnoreSpec) -> re.Pattern[str] | None:
    """One regex that matches wherever any of the patterns matches (used with `search`)."""
    parts = []
    for pattern in spec.patterns:
        regex = getattr(pattern, "regex", None)
        if pattern.include is None or regex is None:
            continue
        # The group names pathspec uses would clash in one alternation.
        parts.append(re.sub(r"\(\?P<\w+>", "(?:", regex.pattern))
    if not parts:
        return None
    floating = "^(?:.+/)?"  # how pathspec starts a pattern that may match at any depth
    try:
        if all(p.startswith(floating) for p in parts):
            # Searching for `(^|/)X` is far cheaper than trying `^(.+/)?X` per pattern.
            return re.compile("(?:^|/)(?:" + "|".join(p[len(floating) :] for p in parts) + ")")
        return re.compile("|".join(f"(?:{p})" for p in parts))
    except re.error:
        return None  # an unexpected pattern shape: check each pattern instead


_DENY = Matcher(
    # Anchored patterns (with a slash inside) would only match at the root: match at any depth.
    p if "/" not in p.rstrip("/") else f"**/{p}"
    for p in DENY_PATTERNS
)


def denied(path: str) -> bool:
    """True when an absolute path names a secret-bearing file or lies in such a folder."""
    return bool(_DENY.check(path.lstrip(os.sep)))


def secret_file(path: Path) -> bool:
    """True when a file, or what a symlink to it points to, is on the deny-list (blocking)."""
    absolute = os.path.abspath(path)
    return denied(absolute) or denied(os.path.realpath(absolute))


@dataclass(frozen=True, slots=True)
class _Spec:
    base: str  # the folder the patterns are relative to, ending in os.sep
    spec: Matcher
    origin: str  # what to name in a refusal: the ignore file or "exclude"


Rules = tuple[_Spec, ...]


def _spec(lines: Iterable[str]) -> Matcher | None:
    spec = Matcher(lines)
    return spec if len(spec) else None


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def enclosing_repository(folder: Path) -> Path | None:
    """The root of the git repository `folder` is in (the nearest folder holding `.git`, a
    folder or a worktree's file), looking no higher than the user's home (blocking)."""
    home = Path(os.path.expanduser("~"))
    for candidate in (folder, *folder.parents):
        if candidate == home:
            return None
        if os.path.lexists(candidate / ".git"):
            return candidate
    return None


def _ignored_by(absolute: str, rules: Rules, *, is_dir: bool) -> str | None:
    """The ignore file (or "an exclude pattern") whose rules ignore `absolute` last, or None."""
    ignored_by: str | None = None
    for rule in rules:
        if not _within(absolute, rule.base):
            continue
        relative = absolute[len(rule.base) :] + ("/" if is_dir else "")
        include = rule.spec.check(relative)
        if include is not None:
            ignored_by = rule.origin if include else None
    return ignored_by


class Admission:
    """The daemon's admission rules; `scope` makes the rules of one root.

    Args:
        settings: `privacy.*`.
        roots: The watched folders now (symlink targets must stay inside one of them).
        forgotten: The paths the user forgot (shared, so a reload keeps them).

    Raises:
        ConfigError: `privacy.symlinks` is not one of `SYMLINK_POLICIES`.
    """

    def __init__(
        self,
        settings: PrivacySettings,
        roots: Callable[[], Iterable[Path]] = tuple,
        forgotten: ForgottenPaths | None = None,
    ) -> None:
        if settings.symlinks not in SYMLINK_POLICIES:
            raise ConfigError(
                f"privacy.symlinks is {settings.symlinks!r}; use one of "
                f"{', '.join(SYMLINK_POLICIES)}"
            )
        self.settings = settings
        self.roots = roots
        self.forgotten = forgotten if forgotten is not None else ForgottenPaths()
        self._folders: dict[str, tuple[tuple[int, ...], Rules]] = {}
        self._lock = threading.Lock()

    def scope(
        self, root: Path, exclude: Sequence[str] = (), *, allow_secrets: bool = False
    ) -> Scope:
        """The rules under `root`, with extra exclude patterns (a source's or a request's)."""
        return Scope(self, Path(os.path.abspath(root)), tuple(exclude), allow_secrets)

    def explicit_refusal(self, path: Path, *, allow_secrets: bool = False) -> str | None:
        """Why an explicitly named file may not enter (only the deny-list and the forgotten
        paths apply), or None."""
        if (forgotten := self.forgotten.refusal(os.path.abspath(path))) is not None:
            return forgotten
        if allow_secrets or not self.settings.deny_secret_files or not secret_file(path):
            return None
        return "a secret-bearing file (deny-list); pass allow_secrets to ingest it"

    def folder_rules(self, folder: str) -> Rules:
        """The patterns of the ignore files in `folder` (blocking: reads them if changed)."""
        if not self.settings.ignore_files:
            return ()
        stamps: list[int] = []
        for name in IGNORE_FILES:
            try:
                stamps.append(os.stat(os.path.join(folder, name)).st_mtime_ns)
            except OSError:
                stamps.append(-1)
        key = tuple(stamps)
        with self._lock:
            cached = self._folders.get(folder)
        if cached is not None and cached[0] == key:
            return cached[1]
        rules: list[_Spec] = []
        base = folder.rstrip(os.sep) + os.sep
        for name, stamp in zip(IGNORE_FILES, key, strict=True):
            if stamp < 0:
                continue
            try:
                # A FIFO or device named .gitignore is skipped, never waited on.
                with open_regular(os.path.join(folder, name)) as f:
                    spec = _spec(f.read().decode("utf-8", "replace").splitlines())
            except OSError:
                continue
            if spec is not None:
                rules.append(_Spec(base, spec, os.path.join(folder, name)))
        with self._lock:
            if len(self._folders) > 100_000:
                self._folders.clear()
            self._folders[folder] = (key, tuple(rules))
        return tuple(rules)


class Scope:
    """The admission rules under one root (a watched folder, or a folder being ingested)."""

    def __init__(
        self, admission: Admission, root: Path, exclude: tuple[str, ...], allow_secrets: bool
    ) -> None:
        self.admission = admission
        self.root = root
        self.allow_secrets = allow_secrets
        settings = admission.settings
        patterns = [*settings.exclude, *exclude]
        spec = _spec(patterns)
        base = os.fspath(root).rstrip(os.sep) + os.sep
        self._exclude: Rules = (_Spec(base, spec, "an exclude pattern"),) if spec else ()

    def rules_in(self, folder: Path, inherited: Rules) -> Rules:
        """The rules that hold inside `folder`: inherited ones plus its ignore files (blocking)."""
        return inherited + self.admission.folder_rules(os.fspath(folder))

    def refusal(self, path: Path, rules: Rules, *, is_dir: bool) -> str | None:
        """Why `path` (directly in a folder whose `rules` are given) may not enter, or None."""
        absolute = os.fspath(path)
        if (forgotten := self.admission.forgotten.refusal(absolute)) is not None:
            return forgotten
        if (
            not self.allow_secrets
            and self.admission.settings.deny_secret_files
            and denied(absolute + (os.sep if is_dir else ""))
        ):
            return "a secret-bearing file (deny-list)"
        ignored_by = _ignored_by(absolute, rules + self._exclude, is_dir=is_dir)
        return f"ignored by {ignored_by}" if ignored_by else None

    def rules_above(self) -> Rules:
        """The ignore files' rules from the enclosing git repository's root down to the root's
        parent (blocking; empty outside a repository, or when they would ignore the root)."""
        if not self.admission.settings.ignore_files:
            return ()
        repository = enclosing_repository(self.root)
        if repository is None or repository == self.root:
            return ()
        rules: Rules = ()
        current = repository
        for part in self.root.relative_to(repository).parts:
            rules = self.rules_in(current, rules)
            current = current / part
            if (origin := _ignored_by(os.fspath(current), rules, is_dir=True)) is not None:
                logger.info(
                    "%s is ignored by %s; watched on purpose, so only its own ignore files apply",
                    self.root,
                    origin,
                )
                return ()
        return rules

    def symlink_refusal(self, path: Path) -> str | None:
        """Why a symlink may not be followed, or None (blocking: resolves it)."""
        policy = self.admission.settings.symlinks
        if policy == "never":
            return "a symlink (privacy.symlinks = never)"
        target = os.path.realpath(path)
        if (forgotten := self.admission.forgotten.refusal(target)) is not None:
            return "a symlink to a path " + forgotten
        if not self.allow_secrets and self.admission.settings.deny_secret_files and denied(target):
            return "a symlink to a secret-bearing file (deny-list)"
        if policy == "all":
            return None
        roots = [self.root, *self.admission.roots()]
        if any(_within(target, os.path.realpath(r)) for r in roots):
            return None
        return "a symlink to a file outside the watched folders"

    def start(self, folder: Path) -> Rules | None:
        """The rules inherited by a folder under the root, None when the folder itself is
        refused (blocking; where a walk starts below the root)."""
        absolute = Path(os.path.abspath(folder))
        try:
            parts = absolute.relative_to(self.root).parts
        except ValueError:
            return ()
        current, rules = self.root, self.rules_above()
        for part in parts:
            rules = self.rules_in(current, rules)
            current = current / part
            if self.refusal(current, rules, is_dir=True) is not None:
                return None
        return rules

    def path_refusal(self, path: Path) -> str | None:
        """Why a file or folder under the root may not enter, checking every folder on the way
        down (blocking; for a single changed path, where no walk carried the rules)."""
        absolute = Path(os.path.abspath(path))
        if absolute == self.root:
            return None
        inherited = self.start(absolute.parent)
        if inherited is None:
            return "inside an ignored folder"
        rules = self.rules_in(absolute.parent, inherited)
        is_dir = os.path.isdir(absolute) and not os.path.islink(absolute)
        if (reason := self.refusal(absolute, rules, is_dir=is_dir)) is not None:
            return reason
        # A link anywhere below the root (the file, or a linked folder on the way) moves the
        # real path away from where it would be without links.
        unlinked = os.path.join(os.path.realpath(self.root), os.path.relpath(absolute, self.root))
        if os.path.realpath(absolute) != unlinked:
            return self.symlink_refusal(absolute)
        return None
