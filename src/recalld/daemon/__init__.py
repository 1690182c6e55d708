"""recalld.daemon."""
