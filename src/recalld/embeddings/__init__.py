"""recalld.embeddings."""
