"""recalld.client."""
