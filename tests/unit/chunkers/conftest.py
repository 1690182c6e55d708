"""Fixtures for the chunker tests: small options that force splitting."""

from __future__ import annotations

import pytest

from recalld.chunkers import ChunkOptions


@pytest.fixture
def small() -> ChunkOptions:
    """Options with a window small enough that short test documents must be split."""
    return ChunkOptions(max_tokens=60, overlap_tokens=10)
