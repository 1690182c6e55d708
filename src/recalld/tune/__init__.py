"""`recalld tune`: self-supervised refinement of the local embedding model (the `tune` extra).

The only part of recalld that imports torch (an import-linter contract keeps it so).
"""
