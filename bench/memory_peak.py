"""The peak of this process's anonymous resident memory over a stretch of work.

The kernel keeps a high-water mark of all resident memory (VmHWM) but not of its anonymous
part (RssAnon: the heap, the arrays, SQLite's page caches), and VmHWM also counts the store
file's memory-mapped pages, which are clean and reclaimable (each reader maps up to 256 MB of
it). A thread samples RssAnon instead, every few milliseconds; an allocation shorter than the
interval can slip between two samples, so the figure is a lower bound of the true peak.
"""

from __future__ import annotations

import threading
from types import TracebackType

_INTERVAL_S = 0.005


def rss_anon_kb() -> int:
    """RssAnon of this process in kB (0 where /proc is missing)."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class AnonPeak:
    """`with AnonPeak() as peak: ...` (or `start()` ... `stop()`), then `peak.mb`: the highest
    RssAnon sampled in between."""

    def __init__(self) -> None:
        self._peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="anon-peak", daemon=True)

    def _sample(self) -> None:
        while True:
            self._peak_kb = max(self._peak_kb, rss_anon_kb())
            if self._stop.wait(_INTERVAL_S):
                return

    def start(self) -> AnonPeak:
        """Start sampling (once)."""
        self._peak_kb = rss_anon_kb()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling; `mb` keeps the peak."""
        self._stop.set()
        self._thread.join()
        self._peak_kb = max(self._peak_kb, rss_anon_kb())

    def __enter__(self) -> AnonPeak:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def mb(self) -> float:
        """The peak so far, in MB (one decimal)."""
        return round(self._peak_kb / 1024, 1)
