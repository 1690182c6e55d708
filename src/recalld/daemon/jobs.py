"""Long work as jobs: `ingest` returns a job id at once and the job runs in the daemon whatever
happens to the client that started it (issue 17).

    ingest ─▶ JobRegistry.start ─▶ queued ─▶ running ─▶ done | failed | cancelled
                                   (at most MAX_RUNNING at once)

Any client can list jobs, read one, follow one (`jobs/wait` answers when the job ends or after
`timeout_s`, with a progress notification each time its figures change) or cancel one. A
client that loses its connection or times out reconnects and follows again; the job never
notices. Finished jobs are kept (the last `KEEP_FINISHED`) so a client that comes back late
still reads the result. Jobs live in memory: a daemon that stops cancels those still running
(their files are picked up again by the next `recalld ingest`).

The socket methods (`ingest`, `jobs/list`, `jobs/get`, `jobs/wait`, `jobs/cancel`) are here and
registered in `daemon.methods`; docs/protocol.md documents them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recalld.daemon.params import InvalidParams, Params
from recalld.errors import NotFoundError, RecalldError

if TYPE_CHECKING:
    from recalld.daemon.methods import Context

logger = logging.getLogger(__name__)

Progress = Callable[[dict[str, Any]], Awaitable[None]]
Work = Callable[[Progress], Awaitable[dict[str, Any]]]

MAX_RUNNING = 2
KEEP_FINISHED = 50
FINAL = ("done", "failed", "cancelled")
# `jobs/wait` answers at the latest after this long, so that no client timeout can end a wait.
DEFAULT_WAIT_S = 10.0
MAX_WAIT_S = 60.0
# Progress notifications of one wait are at least this far apart.
NOTIFY_EVERY_S = 0.25


@dataclass
class Job:
    """One job and its figures (files and chunks done, rate, ETA, current file)."""

    id: str
    kind: str
    path: str
    state: str = "queued"
    created_at: float = field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    done: int = 0
    total: int | None = None
    chunks: int = 0
    embedded: int = 0
    failed: int = 0
    current: str | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    cancel_requested: bool = False
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    changed: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def touch(self) -> None:
        """Wake whoever follows this job."""
        self.changed.set()
        self.changed = asyncio.Event()

    def as_dict(self) -> dict[str, Any]:
        """The job as the protocol returns it."""
        now = time.time()
        elapsed = ((self.finished_at or now) - self.started_at) if self.started_at else 0.0
        rate = self.done / elapsed if elapsed > 0 else 0.0
        eta = None
        if self.state == "running" and self.total is not None and rate > 0:
            eta = round(max(0, self.total - self.done) / rate, 1)
        return {
            "id": self.id,
            "kind": self.kind,
            "path": self.path,
            "state": self.state,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "elapsed_s": round(elapsed, 3),
            "done": self.done,
            "total": self.total,
            "chunks": self.chunks,
            "embedded": self.embedded,
            "failed": self.failed,
            "rate": round(rate, 2),
            "chunk_rate": round(self.chunks / elapsed, 2) if elapsed > 0 else 0.0,
            "eta_s": eta,
            "current": self.current,
            "result": self.result,
            "error": self.error,
        }


class JobRegistry:
    """The daemon's jobs: started here, run as tasks, kept after they end.

    Args:
        max_running: Jobs running at once; later ones wait `queued`.
        keep_finished: Finished jobs remembered for `jobs/list` and late followers.
    """

    def __init__(self, max_running: int = MAX_RUNNING, keep_finished: int = KEEP_FINISHED) -> None:
        self.keep_finished = keep_finished
        self._jobs: dict[str, Job] = {}
        self._slots = asyncio.Semaphore(max_running)

    def start(self, kind: str, path: str, work: Work) -> Job:
        """Queue `work` as a new job and return it at once."""
        job = Job(id=secrets.token_hex(4), kind=kind, path=path)
        self._jobs[job.id] = job
        job.task = asyncio.get_running_loop().create_task(
            self._run(job, work), name=f"recalld-job-{job.id}"
        )
        logger.info("job %s: %s %s queued", job.id, kind, path)
        self._forget_old()
        return job

    def get(self, job_id: str) -> Job:
        """A job by id.

        Raises:
            NotFoundError: No such job (or the daemon restarted since).
        """
        job = self._jobs.get(job_id)
        if job is None:
            raise NotFoundError(
                f"no job {job_id!r}; jobs do not outlive a daemon restart, see `recalld jobs`",
                data={"job": job_id},
            )
        return job

    def all(self) -> list[Job]:
        """Every job known, oldest first."""
        return list(self._jobs.values())

    def cancel(self, job_id: str) -> Job:
        """Ask a job to stop; a finished one is returned as it is.

        Raises:
            NotFoundError: No such job.
        """
        job = self.get(job_id)
        if job.state not in FINAL and job.task is not None:
            job.cancel_requested = True
            job.task.cancel()
            logger.info("job %s: cancel requested", job.id)
        return job

    async def wait(self, job: Job, timeout_s: float, progress: Progress) -> Job:
        """Follow `job` until it ends or `timeout_s` passes, notifying each change."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        last_sent = 0.0
        while job.state not in FINAL:
            left = deadline - loop.time()
            if left <= 0:
                break
            changed = job.changed
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await changed.wait()
            if job.state not in FINAL and loop.time() - last_sent >= NOTIFY_EVERY_S:
                last_sent = loop.time()
                await progress(job.as_dict())
        return job

    async def stop(self) -> None:
        """Cancel every job still queued or running (the daemon is stopping)."""
        tasks = [j.task for j in self._jobs.values() if j.task is not None and not j.task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            logger.info("cancelling %d jobs", len(tasks))
            await asyncio.gather(*tasks, return_exceptions=True)

    def _forget_old(self) -> None:
        finished = [j for j in self._jobs.values() if j.state in FINAL]
        for job in finished[: max(0, len(finished) - self.keep_finished)]:
            del self._jobs[job.id]

    async def _run(self, job: Job, work: Work) -> None:
        async def progress(figures: dict[str, Any]) -> None:
            for name in ("done", "total", "chunks", "embedded", "failed", "current"):
                if name in figures:
                    setattr(job, name, figures[name])
            job.touch()

        try:
            async with self._slots:
                job.state, job.started_at = "running", time.time()
                job.touch()
                logger.info("job %s: running", job.id)
                job.result = await work(progress)
            job.state = "done"
            job.current = None
        except asyncio.CancelledError:
            job.state = "cancelled"
            reason = "cancelled" if job.cancel_requested else "the daemon stopped"
            job.error = {"code": 0, "message": reason, "data": {"type": "Cancelled"}}
        except RecalldError as exc:
            job.state = "failed"
            job.error = {
                "code": exc.code,
                "message": exc.message,
                "data": {**exc.data, "type": type(exc).__name__},
            }
        except Exception as exc:
            logger.error("job %s failed", job.id, exc_info=exc)
            job.state = "failed"
            job.error = {
                "code": -32603,
                "message": f"internal error ({type(exc).__name__}); see the daemon log",
                "data": {},
            }
        finally:
            job.finished_at = time.time()
            job.touch()
            logger.info(
                "job %s: %s after %.1f s (%d files, %d chunks)",
                job.id,
                job.state,
                job.finished_at - (job.started_at or job.created_at),
                job.done,
                job.chunks,
            )
            self._forget_old()


# -- socket methods --------------------------------------------------------------------------


async def ingest(ctx: Context, params: Params, progress: Progress) -> Any:
    """Start ingesting a file or folder as a job; answers at once with the job."""
    path = Path(params.path("path"))  # absolute, short, without NUL
    exclude = params.strings("exclude")
    allow_secrets = params.boolean("allow_secrets", False)
    params.done()
    if not await asyncio.to_thread(path.exists):
        raise NotFoundError(f"{path} does not exist", data={"path": str(path)})
    scheduler = ctx.scheduler

    async def work(report: Progress) -> dict[str, Any]:
        done = await scheduler.ingest_now(
            path, report, exclude=exclude, allow_secrets=allow_secrets
        )
        return done.as_dict()

    return {"job": ctx.jobs.start("ingest", os.fspath(path), work).as_dict()}


async def jobs_list(ctx: Context, params: Params, progress: Progress) -> Any:
    """Every job the daemon knows: running, queued and the last finished ones."""
    params.done()
    return {"jobs": [job.as_dict() for job in ctx.jobs.all()]}


async def jobs_get(ctx: Context, params: Params, progress: Progress) -> Any:
    """One job by id."""
    job_id = params.string("id")
    params.done()
    return ctx.jobs.get(job_id).as_dict()


async def jobs_wait(ctx: Context, params: Params, progress: Progress) -> Any:
    """Follow a job: answer when it ends or after `timeout_s`, notifying its progress."""
    job_id = params.string("id")
    timeout_s = params.number("timeout_s", DEFAULT_WAIT_S)
    if not 0 <= timeout_s <= MAX_WAIT_S:
        raise InvalidParams(f"param 'timeout_s' must be between 0 and {MAX_WAIT_S}", "timeout_s")
    params.done()
    job = await ctx.jobs.wait(ctx.jobs.get(job_id), timeout_s, progress)
    return job.as_dict()


async def jobs_cancel(ctx: Context, params: Params, progress: Progress) -> Any:
    """Cancel a queued or running job; answers once it has stopped."""
    job_id = params.string("id")
    params.done()
    job = ctx.jobs.cancel(job_id)
    if job.task is not None:
        await asyncio.wait({job.task})
    return job.as_dict()


METHODS = {
    "ingest": ingest,
    "jobs/list": jobs_list,
    "jobs/get": jobs_get,
    "jobs/wait": jobs_wait,
    "jobs/cancel": jobs_cancel,
}
