"""recalld.storage."""
