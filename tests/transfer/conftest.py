"""Export and import (issue 8, part 9) reuse the in-process daemon of `tests/pipeline`."""

from __future__ import annotations

from tests.pipeline.conftest import Running, daemon, short_dir

__all__ = ["Running", "daemon", "short_dir"]
