"""Finding keys, tokens and passwords in text, and replacing them before anything is stored.

`redact(text)` returns the text with each secret value replaced by `[REDACTED:<type>]` and what
was found (type and position, never the value). It runs on a document's text after decoding
or conversion and before chunking, so neither chunks, vectors, FTS nor facts ever hold a value.

The rules follow the secret scanners the field trusts, kept small and offline:

- provider formats from gitleaks' default rules (config/gitleaks.toml: `aws-access-token`,
  `github-pat`, `github-fine-grained-pat`, `gitlab-pat`, `slack-*-token`, `slack-webhook-url`,
  `openai-api-key`, `anthropic-api-key`, `stripe-access-token`, `gcp-api-key`, `jwt`,
  `private-key`);
- detect-secrets' `KeywordDetector` (a value assigned to a name such as `password`, `secret`,
  `token`, `api_key`) and `BasicAuthDetector` (a password inside a URL);
- detect-secrets' `Base64HighEntropyString` idea for anything else: a run of at least 32
  base64 characters mixing upper case, lower case and digits with a Shannon entropy of at
  least 4.5 bits per character (its default limit). Pure hex is left alone: commit ids and
  content hashes are everywhere in notes and code, and are not secrets.

detect-secrets itself was not used: it scans files through process-wide settings, and its
rules above fit in this module.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from recalld.types import ChunkDraft

MARKER = "[REDACTED:{}]"
MARKER_RE = re.compile(r"\[REDACTED:([a-z0-9_]+)\]")


@dataclass(frozen=True, slots=True)
class Found:
    """One redacted value: its type and where it was in the original text (offsets)."""

    kind: str
    start: int
    end: int


# (type, pattern, hints); the value is group "v" when the pattern has one, else the whole
# match. A rule runs only on text holding one of its hints (lower case: in the lowered text):
# most text holds none, and a substring test is far cheaper than a regex scan.
_PROVIDER_RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "private_key",
        r"-----BEGIN[ A-Z0-9]{0,30}PRIVATE KEY(?: BLOCK)?-----"
        # Without its END line (a truncated paste), the key's base64 lines that follow.
        r"(?:[\s\S]*?-----END[ A-Z0-9]{0,30}PRIVATE KEY(?: BLOCK)?-----"
        r"|(?:[ \t]*\r?\n[ \t]*[A-Za-z0-9+/=]{16,})*)",
        ("PRIVATE KEY",),
    ),
    (
        "aws_access_key",
        r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}\b",
        ("A3T", "AKIA", "ASIA", "ABIA", "ACCA"),
    ),
    (
        "github_token",
        r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,255}\b",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    ),
    ("github_token", r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b", ("github_pat_",)),
    ("gitlab_token", r"\bglpat-[A-Za-z0-9_-]{20,}\b", ("glpat-",)),
    ("slack_token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}", ("xox",)),
    (
        "slack_webhook",
        r"https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9+/_-]{20,}",
        ("hooks.slack.com",),
    ),
    ("anthropic_key", r"\bsk-ant-[A-Za-z0-9_-]{20,}", ("sk-ant-",)),
    ("openai_key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}", ("sk-",)),
    ("stripe_key", r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}", ("_live_", "_test_")),
    ("google_api_key", r"\bAIza[0-9A-Za-z_-]{35}\b", ("AIza",)),
    (
        "jwt",
        r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}",
        ("eyJ",),
    ),
    (
        "aws_secret_key",
        r"(?i)aws_?secret_?(?:access_?)?key\W{0,4}[:=]\W{0,3}(?P<v>[A-Za-z0-9/+]{40})\b",
        ("aws",),
    ),
    (
        "url_password",
        r"\b[a-z][a-z0-9+.-]{1,20}://[^\s:/@]{1,100}:(?P<v>[^\s@/]{1,200})@",
        ("://",),
    ),
    (
        "bearer_token",
        r"(?i)(?:\bauthorization\W{0,4}(?:bearer|basic|token)|\bbearer)\s+"
        r"(?P<v>[A-Za-z0-9._~+/=-]{16,})",
        ("bearer", "authorization"),
    ),
)

# A value assigned to a name that ends in one of these words (detect-secrets' KeywordDetector).
_KEYWORDS = (
    r"pass(?:word|wd|phrase)|pwd|secret(?:[_-]?key)?|token|api[_-]?key|apikey|"
    r"access[_-]?key(?:[_-]?id)?|private[_-]?key|credentials?|auth[_-]?key"
)
# Tried only where `_KEYWORD_START` finds a keyword's first letters in the lowered text, and
# starting at the keyword (the rest of the name is read backwards from there): one
# case-insensitive pattern tried at every word scanned text ten times slower.
_KEYWORD_START = re.compile(r"pass|pwd|secret|token|api|access|private|credential|auth")
_ASSIGNMENT = re.compile(
    rf"(?i)(?P<kw>{_KEYWORDS})\b\\?[\"'`]?[ \t]*(?::=|=>|=|:)[ \t]*"
    r"(?:(?P<q>\\?[\"'`])(?P<qv>[^\"'`\n\\]{3,200})\\?(?P=q)"
    r"|(?P<uv>[^\s\"'`\\,;]{4,200}))"
)
_NOT_A_VALUE = frozenset(
    {"true", "false", "null", "none", "nil", "undefined", "yes", "no", "required", "optional"}
)
_CODE_CHARS = re.compile(r"[()\[\]{}<>$%]")
_DOTTED_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_PLAIN_NAME = re.compile(r"[A-Za-z_]+")  # a name without digits: a variable, a type
# Not a secret: `xxx`, `${VAR}`, `{{ var }}`, `%(name)s`, `<your key>`, `***`, a colour.
_PLACEHOLDER = re.compile(r"^(.)\1+$|\$\{|\{\{|%\(|<[^>]*>|\*{3,}|^#[0-9A-Fa-f]{3,8}$")

_CANDIDATE = re.compile(r"[A-Za-z0-9+/_-]{32,}={0,2}")  # base64(url), padding at the end
ENTROPY_LIMIT = 4.5
_PROVIDERS = [(kind, re.compile(pattern), hints) for kind, pattern, hints in _PROVIDER_RULES]
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def shannon_entropy(text: str) -> float:
    """Bits per character of `text`'s character distribution."""
    if not text:
        return 0.0
    total = len(text)
    return -sum(n / total * math.log2(n / total) for n in Counter(text).values())


def _name_at(text: str, match: re.Match[str]) -> str:
    """The whole name whose keyword `match` found: `DB_PASSWORD` for `PASSWORD`."""
    start = match.start()
    while start > 0 and text[start - 1] in _NAME_CHARS:
        start -= 1
    return text[start : match.end("kw")]


def _assignment_value(text: str, match: re.Match[str]) -> tuple[int, int] | None:
    key = _name_at(text, match)
    if match.group("qv") is not None:
        value, span = match.group("qv"), match.span("qv")
    else:
        value, span = match.group("uv"), match.span("uv")
        # Code, not a value: `password = get_password()`, `token: Optional[str]`,
        # `api_key = settings.api_key`, `api_key: Secret`, `password = user_password`.
        if (
            _CODE_CHARS.search(value)
            or _DOTTED_NAME.fullmatch(value)
            or _PLAIN_NAME.fullmatch(value)
        ):
            return None
    lowered = value.lower()
    if (
        lowered in _NOT_A_VALUE
        or lowered == key.lower()
        or value.isdigit()
        or value.startswith(MARKER[:10])
        or _PLACEHOLDER.search(value)
    ):
        return None
    return span


# A piece of an identifier or path: `LD_LIBRARY_PATH`, `reproducible-path`, `camelCaseName`.
# Hex (a commit id, a content hash) counts as wordy too.
_WORDY = re.compile(r"(?:[A-Z]?[a-z]{2,}|[A-Z]{2,}|\d{1,4})+|[0-9a-f]{7,}|[0-9A-F]{7,}")


def _random_looking(word: str) -> bool:
    wordy = sum(len(p) for p in re.split(r"[/_=.+-]", word) if _WORDY.fullmatch(p))
    return (
        wordy * 2 < len(word)
        and any(c.isupper() for c in word)
        and any(c.islower() for c in word)
        and any(c.isdigit() for c in word)
        and shannon_entropy(word) >= ENTROPY_LIMIT
    )


# A provider rule is run only near its hints: from _BEHIND characters before one to _REACH
# after it (a key block: _KEY_BLOCK_REACH), the longest value a rule takes with room to spare.
_BEHIND = 40
_REACH = 2048
_KEY_BLOCK_REACH = 32768


def _lower(text: str) -> str:
    """`text` in lower case with the same length, so offsets carry over."""
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.translate(_ASCII_LOWER)


def _windows(haystack: str, hints: Sequence[str], ahead: int) -> list[tuple[int, int]]:
    """The stretches of text around each occurrence of a hint, overlapping ones merged."""
    spots: list[int] = []
    for hint in hints:
        at = haystack.find(hint)
        while at != -1:
            spots.append(at)
            at = haystack.find(hint, at + 1)
    merged: list[tuple[int, int]] = []
    for at in sorted(spots):
        start, end = max(0, at - _BEHIND), min(len(haystack), at + ahead)
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def find_secrets(text: str, *, entropy: bool = True) -> list[Found]:
    """Every secret value in `text`, in order, without overlaps (the first rule wins)."""
    found: list[Found] = []
    taken: list[tuple[int, int]] = []

    def add(kind: str, start: int, end: int) -> None:
        if end > start and not any(start < e and s < end for s, e in taken):
            taken.append((start, end))
            found.append(Found(kind, start, end))

    lowered = _lower(text)
    for kind, pattern, hints in _PROVIDERS:
        haystack = lowered if hints[0].islower() else text
        ahead = _KEY_BLOCK_REACH if kind == "private_key" else _REACH
        for start, end in _windows(haystack, hints, ahead):
            for match in pattern.finditer(text, start, end):
                group = "v" if "v" in pattern.groupindex else 0
                add(kind, *match.span(group))
    for hit in _KEYWORD_START.finditer(lowered):
        assigned = _ASSIGNMENT.match(text, hit.start())
        if assigned is not None and (span := _assignment_value(text, assigned)) is not None:
            keyword = assigned.group("kw").lower()
            add("password" if keyword.startswith(("pass", "pwd")) else "secret", *span)
    if entropy:
        for candidate in _CANDIDATE.finditer(text):
            if _random_looking(candidate.group()) and not _in_url_path(text, candidate.start()):
                add("high_entropy", *candidate.span())
    return sorted(found, key=lambda f: f.start)


_URL_START = re.compile(r"[\s\"'<>()\[\]]")


def _in_url_path(text: str, at: int) -> bool:
    """True inside the host or path of a URL (a document id, an image name): a link stays
    whole. Query values (`?sig=...`) are still looked at."""
    start = max(0, at - _REACH)
    words = _URL_START.split(text[start:at])
    return "://" in words[-1] and "?" not in words[-1]


def redact(text: str, *, entropy: bool = True) -> tuple[str, list[Found]]:
    """`text` with every secret value replaced by `[REDACTED:<type>]`, and what was found."""
    found = find_secrets(text, entropy=entropy)
    if not found:
        return text, []
    parts: list[str] = []
    at = 0
    for item in found:
        parts.append(text[at : item.start])
        parts.append(MARKER.format(item.kind))
        at = item.end
    parts.append(text[at:])
    return "".join(parts), found


def markers(text: str) -> list[dict[str, object]]:
    """The redaction markers in a chunk's text: type and offset, for the chunk's meta."""
    return [{"type": m.group(1), "at": m.start()} for m in MARKER_RE.finditer(text)]


def redact_note(found: Sequence[Found]) -> str:
    """What was redacted, for the document's notes: counts by type, never a value."""
    kinds = Counter(f.kind for f in found)
    listed = ", ".join(f"{kind} x{n}" if n > 1 else kind for kind, n in sorted(kinds.items()))
    return f"redacted {len(found)} secret{'s' if len(found) != 1 else ''}: {listed}"


def redact_marked(text: str, *, entropy: bool = True) -> tuple[str, list[dict[str, object]]]:
    """`text` redacted, and every marker the result holds (type and offset, for a chunk's
    `meta.redacted`): what `import` writes for text that did not go through ingest."""
    clean, found = redact(text, entropy=entropy)
    return (clean, markers(clean)) if found else (text, [])


def mark_redactions(chunks: Sequence[ChunkDraft]) -> list[ChunkDraft]:
    """The chunks, each holding a marker recording them in `meta["redacted"]`."""
    out = []
    for chunk in chunks:
        found = markers(chunk.text) if "[REDACTED:" in chunk.text else []
        out.append(replace(chunk, meta={**chunk.meta, "redacted": found}) if found else chunk)
    return out
