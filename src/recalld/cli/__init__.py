"""recalld.cli."""
