"""The token counts of recently embedded texts, so a text is tokenised once, not twice.

Ingest embeds each chunk and then stores its token count: without this memo the tokenizer runs
on every chunk a second time just to count (10 s of a 100 s SciFact ingest on a loaded 2-core
machine). Embedding records each text's count here; `count_tokens` looks it up first.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

# Bounded by characters, not entries: the memo keeps its texts alive, and ingest asks for the
# counts of one call's texts (hundreds to a few thousand chunks) right after embedding them.
MAX_CHARS = 4_000_000


class RecentCounts:
    """A thread-safe, first-in-first-out memo from text to token count.

    Args:
        max_chars: Most characters of text held; the oldest entries go first.
    """

    def __init__(self, max_chars: int = MAX_CHARS) -> None:
        self.max_chars = max_chars
        self._counts: dict[str, int] = {}
        self._chars = 0
        self._lock = threading.Lock()

    def put(self, texts: Sequence[str], counts: Sequence[int]) -> None:
        """Remember each text's count (texts larger than the whole memo are skipped)."""
        with self._lock:
            for text, count in zip(texts, counts, strict=True):
                if text in self._counts or len(text) > self.max_chars:
                    continue
                self._counts[text] = count
                self._chars += len(text)
            while self._chars > self.max_chars:
                oldest = next(iter(self._counts))
                del self._counts[oldest]
                self._chars -= len(oldest)

    def get(self, text: str) -> int | None:
        """The remembered count of `text`, or None."""
        with self._lock:
            return self._counts.get(text)
