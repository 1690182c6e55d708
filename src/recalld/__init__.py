"""recalld: local-first long-term memory for AI assistants, editors and agents."""

__version__ = "0.1.0"
