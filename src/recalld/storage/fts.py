"""Building FTS5 queries from user text, so no user input ever reaches FTS5 syntax.

Every term is double-quoted (quotes inside doubled), which makes FTS5 treat it as a string to
tokenise rather than as syntax: `NEAR`, `*`, `:`, `^`, parentheses and `AND OR NOT` become plain
words. Terms are joined with OR so BM25 ranks by how many and how rare the matching terms are
(vstash section 3.2).
"""

from __future__ import annotations

import re

# Identifiers stay whole (`ERR_CONN_RESET`, `snake_case_names`): FTS5 then matches their parts
# as a phrase. Apostrophes inside words ("don't") are kept so they do not leave stray letters.
_TERM = re.compile(r"\w+(?:'\w+)*", re.UNICODE)

# Words too common to help BM25; dropping them keeps OR queries cheap on big stores.
STOPWORDS = frozenset(
    """a an and are as at be been but by can did do does for from had has have he her his how i
    if in into is it its me my no not of on or our she so than that the their them then there
    these they this to was we were what when where which who whom why will with would you your
    about after all also any because before being both could each few more most other over own
    same should some such through too under until up very while""".split()
)


def query_terms(text: str) -> list[str]:
    """The distinct search terms of `text`, in order, without stopwords.

    If every word is a stopword the stopwords are kept, so such a query still searches.
    """
    words = [w for w in _TERM.findall(text) if w.strip("_")]
    seen: set[str] = set()
    terms: list[str] = []
    for word in words:
        folded = word.lower()
        if folded in seen or folded in STOPWORDS:
            continue
        seen.add(folded)
        terms.append(word)
    if not terms:
        terms = list(dict.fromkeys(w.lower() for w in words))
    return terms


def quote_term(term: str) -> str:
    """Quote one term as an FTS5 string (sqlite-utils' `quote_fts`)."""
    return '"' + term.replace('"', '""') + '"'


def match_expression(terms: list[str]) -> str:
    """An FTS5 MATCH expression that ORs the quoted terms; empty if there are none."""
    return " OR ".join(quote_term(t) for t in terms)
