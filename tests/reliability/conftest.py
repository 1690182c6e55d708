"""The reliability suite (issue 6) reuses the daemons of the other suites: the in-process one
from `tests/pipeline` and the subprocess one from `tests/integration`."""

from __future__ import annotations

from tests.integration.conftest import Daemon, make_daemon
from tests.pipeline.conftest import Running, daemon, short_dir

__all__ = ["Daemon", "Running", "daemon", "make_daemon", "short_dir"]
