"""recalld.retrieval."""
