"""Benchmarks: retrieval quality on BEIR and LoCoMo, vector search at scale, ingest throughput.

Every figure is reported beside baselines measured in the same run (`python -m recalld.bench`).
"""
