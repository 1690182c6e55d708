"""A corpus of bad input dropped into a watched folder (issue 6): every file is either ingested
correctly or recorded in `errors/list` with a clear reason, the good lines of a damaged log
are kept, and the daemon keeps answering throughout, including after a restart that finds
all of it again by scanning."""

from __future__ import annotations

import asyncio
import io
import json
import os
import random
import resource
import zipfile
from pathlib import Path
from typing import Any

from recalld.client import AsyncClient
from tests.pipeline.conftest import Running, daemon_env, start, stop, wait_until

SEED = 6
LIMIT_MB = 1
HUGE_MB = 400  # sparse: takes no disk, and would take 400 MB of memory if it were read


def minimal_pdf(text: str) -> bytes:
    """A small valid one-page PDF showing `text`."""
    stream = f"BT /F1 24 Tf 72 700 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def write_bytes_at(folder: Path, name: bytes, data: bytes) -> None:
    """Create a file whose name is raw bytes (pathlib cannot spell invalid UTF-8)."""
    fd = os.open(os.fsencode(folder) + b"/" + name, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def make_corpus(folder: Path) -> None:
    rng = random.Random(SEED)
    pdf = minimal_pdf("Pelican migration report")
    (folder / "good.pdf").write_bytes(pdf)
    (folder / "truncated.pdf").write_bytes(pdf[: len(pdf) // 2])
    junk = io.BytesIO()
    with zipfile.ZipFile(junk, "w") as archive:
        archive.writestr("junk.bin", rng.randbytes(2000))
        archive.writestr("more/junk.txt", rng.randbytes(500))
    (folder / "report.docx").write_bytes(junk.getvalue())
    (folder / "random.md").write_bytes(rng.randbytes(8000))
    (folder / "empty.md").write_bytes(b"")
    with (folder / "huge.txt").open("wb") as handle:
        handle.truncate(HUGE_MB * 2**20)
    (folder / "latin1.txt").write_bytes(
        "Crème brûlée at the café: a naïve façade.".encode("latin-1")
    )
    (folder / "utf16.txt").write_bytes("Übersicht über Zürich und Genève.".encode("utf-16"))
    lines = [
        json.dumps({"role": "user", "content": "Where does the walrus colony haul out?"}),
        "{broken json",
        "not json at all",
        json.dumps({"role": "assistant", "content": "The walrus colony hauls out on Svalbard."}),
        '{"role": 5, "content": []}',
        json.dumps({"role": "user", "content": "And the narwhal pods?"}),
        json.dumps({"role": "assistant", "content": "Narwhal pods winter in Baffin Bay."}),
        '{"role": "user", "content": "a line cut off by a cra',  # no newline: the writer died
    ]
    (folder / "chat.jsonl").write_text("\n".join(lines))
    os.symlink("loop_b.md", folder / "loop_a.md")
    os.symlink("loop_a.md", folder / "loop_b.md")
    (folder / "sub").mkdir()
    os.symlink("..", folder / "sub" / "up")  # a folder loop: links to folders are not followed
    (folder / "locked.md").write_text("Locked away: the ocelot.\n")
    os.chmod(folder / "locked.md", 0)
    (folder / "two\nlines.md").write_text("A name with a newline: the marmot.\n")
    write_bytes_at(folder, b"bad\xffname.md", b"Invalid UTF-8 in the name: the tapir.\n")
    os.mkfifo(folder / "pipe.md")
    os.symlink("/dev/zero", folder / "zero.md")


# Expected outcome per file: ("ingested", query that must find it) or (error type, reason).
def expected(folder: Path) -> dict[str, tuple[str, str]]:
    outcomes = {
        "good.pdf": ("ingested", "pelican migration"),
        "latin1.txt": ("ingested", "crème brûlée"),
        "utf16.txt": ("ingested", "Zürich Genève"),
        "chat.jsonl": ("ingested", "walrus Svalbard"),
        "two\nlines.md": ("ingested", "marmot"),
        "empty.md": ("empty", ""),
        "truncated.pdf": ("ParseError", "check that the file is complete"),
        "report.docx": ("ParseError", "not a DOCX file"),
        "random.md": ("ParseError", "looks binary"),
        "huge.txt": ("IngestError", f"over the {LIMIT_MB} MiB limit"),
        "loop_a.md": ("IngestError", "Too many levels of symbolic links"),
        "loop_b.md": ("IngestError", "Too many levels of symbolic links"),
        "bad\\xffname.md": ("IngestError", "not valid UTF-8; rename the file"),
        "pipe.md": ("IngestError", "not a regular file"),
        # A symlink out of the watched folder is not followed (issue 16): neither stored nor
        # an error.
        "zero.md": ("kept out", ""),
    }
    # As root, permission bits do not stop reads: the file is simply ingested.
    if os.geteuid() == 0:
        outcomes["locked.md"] = ("ingested", "ocelot")
    else:
        outcomes["locked.md"] = ("IngestError", "Permission denied")
    return {os.fspath(folder) + "/" + name: outcome for name, outcome in outcomes.items()}


class Pinger:
    """Asks for `status` every 50 ms on its own connection; any failure is kept."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.answers = 0
        self.failures: list[str] = []
        self.slowest = 0.0
        self.task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        async with AsyncClient(self.socket, timeout=10) as client:
            while True:
                started = asyncio.get_running_loop().time()
                try:
                    assert (await client.status())["state"] == "ready"
                    self.answers += 1
                except Exception as exc:
                    self.failures.append(repr(exc))
                self.slowest = max(self.slowest, asyncio.get_running_loop().time() - started)
                await asyncio.sleep(0.05)

    def __enter__(self) -> Pinger:
        self.task = asyncio.get_running_loop().create_task(self.run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.task is not None
        self.task.cancel()


async def settle(running: Running, folder: Path) -> dict[str, Any]:
    """Wait until every file has its outcome (a document or an error) and the daemon is idle.

    Idle alone is not enough: the name that is not UTF-8 makes the watcher fail and drop the
    events it held, and those files come in by the rescan after the watcher restarts.
    """
    wanted = {s for s, (kind, _) in expected(folder).items() if kind != "kept out"}

    async def done() -> bool:
        docs, errors = await outcomes(running)
        async with running.client() as client:
            idle = (await client.status())["pending"] == 0
        return idle and wanted <= set(docs) | {e["source"] for e in errors}

    await wait_until(done, 60)
    async with running.client() as client:
        status: dict[str, Any] = await client.status()
    return status


async def outcomes(running: Running) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    assert running.server.memory is not None
    async with running.client() as client:
        errors = await client.errors(limit=1000)

    docs = await running.server.memory.store.read(lambda c: c.documents("/", 1000))
    return {d.source: {"state": d.state, "chunks": d.chunk_count} for d in docs}, errors


async def verify(running: Running, folder: Path) -> dict[str, str]:
    docs, errors = await outcomes(running)
    by_source: dict[str, list[dict[str, Any]]] = {}
    for error in errors:
        by_source.setdefault(error["source"], []).append(error)
    report: dict[str, str] = {}
    async with running.client() as client:
        for source, (kind, detail) in expected(folder).items():
            name = os.path.basename(source)
            if kind == "ingested":
                assert docs.get(source, {}).get("state") == "complete", (name, docs.get(source))
                hits = (await client.search(detail, mode="bm25"))["hits"]
                assert hits and hits[0]["source"] == source, (name, hits[:1])
                assert source not in by_source, by_source.get(source)
                report[name] = f"ingested ({docs[source]['chunks']} chunks)"
            elif kind == "empty":
                assert docs[source] == {"state": "complete", "chunks": 0}
                report[name] = "ingested, empty (0 chunks)"
            elif kind == "kept out":
                assert source not in docs and source not in by_source, name
                report[name] = "kept out"
            else:
                found = by_source.get(source)
                assert found, f"{name!r}: no error recorded; errors: {sorted(by_source)}"
                # One row per source, however many scans refused it.
                assert len(found) == 1, found
                assert found[0]["type"] == kind and detail in found[0]["message"], found[0]
                assert source not in docs, docs.get(source)
                report[name] = f"{kind}: {found[0]['message']}"
        # The good rounds of the damaged log are all there.
        for query in ("walrus Svalbard", "narwhal Baffin"):
            hits = (await client.search(query, mode="bm25"))["hits"]
            assert hits and hits[0]["source"] == f"{folder}/chat.jsonl", query
    unexpected = set(by_source) - set(expected(folder))
    assert not unexpected, unexpected
    return report


async def test_bad_input_corpus(isolated_home: Path, short_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "inbox"
    folder.mkdir()
    env = daemon_env(
        isolated_home,
        short_dir / "s.sock",
        RECALLD_DAEMON__WATCH=str(folder),
        RECALLD_DAEMON__MAX_FILE_MB=str(LIMIT_MB),
    )
    server, task = await start(env)
    running = Running(server, task, short_dir / "s.sock", isolated_home, env)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    try:
        with Pinger(running.socket) as pinger:
            # Dropped while the daemon watches: the watcher's events bring them in.
            await asyncio.to_thread(make_corpus, folder)
            await settle(running, folder)
            first = await verify(running, folder)
            # The pipeline is not stuck behind any of them: a good file still comes in.
            await asyncio.to_thread(
                (folder / "later.md").write_text, "Written afterwards: the quokka.\n"
            )

            async def later() -> bool:
                async with running.client() as client:
                    hits = (await client.search("quokka", mode="bm25"))["hits"]
                    return bool(hits)

            await wait_until(later, 30)
            # Liveness, not a rate: a fast machine can finish the corpus in under ten pings.
            await wait_until(lambda: pinger.answers > 10, 30)
        assert not pinger.failures, pinger.failures[:5]
    finally:
        assert await stop(server, task) == 0
    # Never read whole: the process grew by far less than the refused file's size.
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss_before
    assert grown < HUGE_MB * 2**20 / 2, grown

    # A restart finds everything again by scanning, not by events: same outcomes, no
    # duplicate error rows, nothing ingested twice.
    server, task = await start(env)
    running = Running(server, task, short_dir / "s.sock", isolated_home, env)
    try:
        with Pinger(running.socket) as pinger:
            status = await settle(running, folder)
            again = await verify(running, folder)
        assert not pinger.failures, pinger.failures[:5]
        assert status["ingested"]["ingested"] == 0  # every good file was already stored
    finally:
        assert await stop(server, task) == 0
    assert again == first
    print(
        f"\n{len(first)} bad or unusual inputs (root: {os.geteuid() == 0}); daemon answered "
        f"{pinger.answers} status calls during the rescan, slowest {pinger.slowest * 1000:.0f} ms"
    )
    for name, outcome in sorted(first.items()):
        print(f"  {name!r}: {outcome}")
