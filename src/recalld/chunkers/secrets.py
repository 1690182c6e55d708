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


# (type, pattern); the value is group "v" when the pattern has one, else the whole match.
_PROVIDER_RULES: tuple[tuple[str, str], ...] = (
    (
        "private_key",
        r"-----BEGIN[ A-Z0-9]{0,30}PRIVATE KEY(?: BLOCK)?-----"
        # Without its END line (a truncated paste), the key's base64 lines that follow.
        r"(?:[\s\S]*?-----END[ A-Z0-9]{0,30}PRIVATE KEY(?: BLOCK)?-----"
        r"|(?:[ \t]*\r?\n[ \t]*[A-Za-z0-9+/=]{16,})*)",
    ),
    ("aws_access_key", r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}\b"),
    ("github_token", r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,255}\b"),
    ("github_token", r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b"),
    ("gitlab_token", r"\bglpat-[A-Za-z0-9_-]{20,}\b"),
    ("slack_token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    (
        "slack_webhook",
        r"https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9+/_-]{20,}",
    ),
    ("anthropic_key", r"\bsk-ant-[A-Za-z0-9_-]{20,}"),
    ("openai_key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
    ("stripe_key", r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"),
    ("google_api_key", r"\bAIza[0-9A-Za-z_-]{35}\b"),
    ("jwt", r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),
    (
        "aws_secret_key",
        r"(?i)aws_?secret_?(?:access_?)?key\W{0,4}[:=]\W{0,3}(?P<v>[A-Za-z0-9/+]{40})\b",
    ),
    ("url_password", r"\b[a-z][a-z0-9+.-]{1,20}://[^\s:/@]{1,100}:(?P<v>[^\s@/]{1,200})@"),
    (
        "bearer_token",
        r"(?i)(?:\bauthorization\W{0,4}(?:bearer|basic|token)|\bbearer)\s+"
        r"(?P<v>[A-Za-z0-9._~+/=-]{16,})",
    ),
)

# A value assigned to a name that ends in one of these words (detect-secrets' KeywordDetector).
_KEYWORDS = (
    r"pass(?:word|wd|phrase)|pwd|secret(?:[_-]?key)?|token|api[_-]?key|apikey|"
    r"access[_-]?key(?:[_-]?id)?|private[_-]?key|credentials?|auth[_-]?key"
)
_ASSIGNMENT = re.compile(
    rf"(?i)\b(?P<key>[a-z0-9_.-]*?(?:{_KEYWORDS}))\b\\?[\"'`]?[ \t]*(?::=|=>|=|:)[ \t]*"
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

_CANDIDATE = re.compile(r"[A-Za-z0-9+/=_-]{32,}")
ENTROPY_LIMIT = 4.5
_PROVIDERS = [(kind, re.compile(pattern)) for kind, pattern in _PROVIDER_RULES]


def shannon_entropy(text: str) -> float:
    """Bits per character of `text`'s character distribution."""
    if not text:
        return 0.0
    total = len(text)
    return -sum(n / total * math.log2(n / total) for n in Counter(text).values())


def _assignment_value(match: re.Match[str]) -> tuple[int, int] | None:
    key = match.group("key")
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


def find_secrets(text: str, *, entropy: bool = True) -> list[Found]:
    """Every secret value in `text`, in order, without overlaps (the first rule wins)."""
    found: list[Found] = []
    taken: list[tuple[int, int]] = []

    def add(kind: str, start: int, end: int) -> None:
        if end > start and not any(start < e and s < end for s, e in taken):
            taken.append((start, end))
            found.append(Found(kind, start, end))

    for kind, pattern in _PROVIDERS:
        for match in pattern.finditer(text):
            group = "v" if "v" in pattern.groupindex else 0
            add(kind, *match.span(group))
    for match in _ASSIGNMENT.finditer(text):
        if (span := _assignment_value(match)) is not None:
            add("password" if "pass" in match.group("key").lower() else "secret", *span)
    if entropy:
        for match in _CANDIDATE.finditer(text):
            if _random_looking(match.group()):
                add("high_entropy", *match.span())
    return sorted(found, key=lambda f: f.start)


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


def mark_redactions(chunks: Sequence[ChunkDraft]) -> list[ChunkDraft]:
    """The chunks, each holding a marker recording them in `meta["redacted"]`."""
    out = []
    for chunk in chunks:
        found = markers(chunk.text) if "[REDACTED:" in chunk.text else []
        out.append(replace(chunk, meta={**chunk.meta, "redacted": found}) if found else chunk)
    return out
