"""recalld.chunkers."""
