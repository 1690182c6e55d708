"""Benchmarks: retrieval quality on BEIR and LoCoMo, vector search at scale, ingest throughput.

Every figure is reported beside baselines measured in the same run. Run from the checkout as
`python -m bench COMMAND`: this folder sits beside `tests/`, outside the `recalld` package and its
wheel.
"""
