from recalld.storage.fts import match_expression, query_terms, quote_term


def test_terms_drop_stopwords_and_duplicates_but_keep_identifiers():
    assert query_terms("What is the ERR_CONN_RESET error and the error code?") == [
        "ERR_CONN_RESET",
        "error",
        "code",
    ]
    assert query_terms("snake_case_names") == ["snake_case_names"]


def test_all_stopword_query_still_searches():
    assert query_terms("what is it") == ["what", "is", "it"]


def test_hostile_input_becomes_quoted_strings():
    terms = query_terms('"NEAR(a b)" OR x* AND col:val ^start NOT (y)')
    expr = match_expression(terms)
    assert expr == '"NEAR" OR "b" OR "x" OR "col" OR "val" OR "start" OR "y"'
    assert match_expression(["AND", "NEAR"]) == '"AND" OR "NEAR"'
    assert "*" not in expr and ":" not in expr and "(" not in expr and "^" not in expr


def test_quote_term_doubles_quotes():
    assert quote_term('say "hi"') == '"say ""hi"""'


def test_empty():
    assert query_terms("!!! ???") == []
    assert match_expression([]) == ""
