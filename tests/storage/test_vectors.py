"""The vector cascade (storage/sqlite/vectors.py) against sqlite-vec's exact KNN, on real files."""

import asyncio
import contextlib
import dataclasses
import threading
from pathlib import Path

import numpy as np
import pytest
import simsimd

from recalld.errors import QueryError
from recalld.storage import records
from recalld.storage.contract import Store
from recalld.storage.registry import open_store
from recalld.storage.sqlite import schema, segmented, vectors
from recalld.storage.sqlite.connection import connect
from recalld.types import NO_FILTERS, ChunkDraft, Filters

DIM = 384
# Small candidate pools, so the cascade really has to choose (and can be wrong).
TIGHT = vectors.Tuning(
    exact_below=0,
    stage1_fraction=0.05,
    stage1_min=50,
    stage2_fraction=0.03,
    stage2_min=80,
    stage3_fraction=0.01,
    stage3_min=40,
    per_k=1,
)


def clustered(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((max(4, n // 50), DIM)).astype(np.float32)
    x = centres[rng.integers(0, len(centres), n)] + 0.8 * rng.standard_normal((n, DIM)).astype(
        np.float32
    )
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v)).astype(np.float32)


def near(v: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A query near `v`: the vector plus noise, normalised."""
    return unit(v + 0.6 * rng.standard_normal(DIM).astype(np.float32) / np.sqrt(DIM))


def assert_same_hits(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> None:
    """The same ids in the same order, at the same distances (to float rounding)."""
    assert [c for c, _ in got] == [c for c, _ in want]
    assert np.allclose([d for _, d in got], [d for _, d in want], atol=1e-5)


async def put(store: Store, source: str, vecs: np.ndarray, kind="text", granularity="chunk"):
    chunks = [
        records.NewChunk(
            ChunkDraft(text=f"{source} {i}", kind=kind, granularity=granularity, key=f"k{i}"),
            2,
            v,
        )
        for i, v in enumerate(vecs)
    ]
    doc = records.NewDocument(source, kind, "markdown", f"h{hash(vecs.tobytes())}")
    return await store.write(lambda c: c.replace_document(doc, chunks))


async def knn(store: Store, q: np.ndarray, k: int = 10, filters: Filters = NO_FILTERS):
    return await store.read(lambda c: c.knn(q, k, filters))


async def exact(store: Store, q: np.ndarray, k: int = 10, filters: Filters = NO_FILTERS):
    tuning = store.vectors.tuning
    store.vectors.tuning = dataclasses.replace(tuning, exact_below=2**62, exact_in_memory=False)
    try:
        return await knn(store, q, k, filters)
    finally:
        store.vectors.tuning = tuning


def use(store: Store, route: str) -> None:
    """Search by the cascade (any size) or exactly from the float copies in memory."""
    store.vectors.tuning = dataclasses.replace(
        vectors.Tuning(), exact_below=0 if route == "cascade" else 20_000
    )


@pytest.fixture
async def store(tmp_path: Path):
    s = await open_store(tmp_path / "v.db", model_id="test-384", dimension=DIM)
    yield s
    await s.close()


@pytest.fixture
async def filled(store: Store):
    data = clustered(3000)
    for d in range(30):
        kind, gran = ("conversation", "round") if d % 3 == 0 else ("text", "chunk")
        await put(store, f"doc{d}.md", data[d * 100 : (d + 1) * 100], kind, gran)
    return store, data


def test_encode_matches_sqlite_vec_bit_order():
    conn = connect(":memory:")
    v = np.random.default_rng(3).standard_normal(DIM).astype(np.float32)
    theirs = conn.execute("SELECT vec_quantize_binary(?)", (v.tobytes(),)).fetchone()[0]
    ours = vectors.encode(v, DIM)[0].tobytes()
    assert ours[: DIM // 8] == theirs
    assert len(ours) == vectors.code_bytes(DIM) == 96
    conn.close()


async def test_cascade_returns_the_exact_top_10(filled):
    store, data = filled
    store.vectors.tuning = dataclasses.replace(vectors.Tuning(), exact_below=0)
    rng = np.random.default_rng(7)
    for i in rng.integers(0, len(data), 25):
        q = near(data[i], rng)
        got, want = await knn(store, q), await exact(store, q)
        assert_same_hits(got, want)
    assert store.vectors.use_for((), ())


async def test_the_int8_stage_over_every_survivor_returns_the_exact_top_10(filled):
    """Every stage-1 survivor (here 2,000) is scored on its int8 copy: the exact top 10, and
    asked for 50, the exact 50 too."""
    store, data = filled
    store.vectors.tuning = dataclasses.replace(vectors.Tuning(), exact_below=0)
    await knn(store, data[0])
    await store.vectors.wait_filled()
    rng = np.random.default_rng(12)
    for i in rng.integers(0, len(data), 20):
        q = near(data[i], rng)
        got, want = await knn(store, q), await exact(store, q)
        assert_same_hits(got, want)
        got, want = await knn(store, q, 50), await exact(store, q, 50)
        assert np.allclose([d for _, d in got], [d for _, d in want], atol=1e-5)


@pytest.mark.parametrize("kernels", ["serial", "haswell"])
async def test_the_cascade_is_exact_on_older_cpus(filled, kernels):
    """simsimd picks its kernels per CPU at run time: with only its portable C kernels, or
    only the AVX2 ones (Haswell), Hamming and the int8 stage give the same exact top 10."""
    newer = ["skylake", "ice", "genoa", "sapphire", "turin", "sierra"]
    turned_off = [c for c, on in simsimd.get_capabilities().items() if on and c != "serial"]
    if kernels == "haswell":
        if "haswell" not in turned_off:
            pytest.skip("this CPU has no AVX2")
        turned_off = [c for c in turned_off if c in newer]
    store, data = filled
    store.vectors.tuning = dataclasses.replace(vectors.Tuning(), exact_below=0)
    await knn(store, data[0])
    await store.vectors.wait_filled()
    rng = np.random.default_rng(13)
    queries = [near(data[i], rng) for i in rng.integers(0, len(data), 10)]
    for capability in turned_off:
        simsimd.disable_capability(capability)
    try:
        for q in queries:
            got, want = await knn(store, q), await exact(store, q)
            assert_same_hits(got, want)
    finally:
        for capability in turned_off:
            simsimd.enable_capability(capability)


async def test_tight_cascade_keeps_recall(filled):
    store, data = filled
    store.vectors.tuning = TIGHT
    rng = np.random.default_rng(8)
    recall = []
    for i in rng.integers(0, len(data), 40):
        q = unit(data[i] + 0.8 * rng.standard_normal(DIM).astype(np.float32) / np.sqrt(DIM))
        got, want = await knn(store, q), await exact(store, q)
        recall.append(len({c for c, _ in got} & {c for c, _ in want}) / 10)
    assert np.mean(recall) >= 0.95


def test_hamming_fills_its_distances_half_by_half():
    rng = np.random.default_rng(4)
    n, words = 150_000, vectors.code_bytes(DIM) // 16  # more than two blocks a half
    signs = rng.integers(0, 2**63, (n, words), dtype=np.uint64)
    qcode = rng.integers(0, 2**63, words, dtype=np.uint64)
    dist = np.empty(n, dtype=np.uint16)
    for lo, hi in ((0, n // 2), (n // 2, n)):
        vectors._hamming(signs, qcode, dist, lo, hi)
    bits = np.unpackbits((signs ^ qcode).view(np.uint8), axis=1)
    assert np.array_equal(dist, bits.sum(axis=1))


def test_work_in_two_returns_both_results_in_order():
    # The first part runs in the calling thread, the second on the pool's.
    where = {}

    def work(part):
        where[part] = threading.current_thread().name
        return part * 2

    assert vectors._in_two(work, 3, 5) == [6, 10]
    assert where[3] == threading.current_thread().name
    assert where[5].startswith("recalld-vectors")


@pytest.mark.parametrize("shape", ["spread", "one_value", "sampled_low", "sentinels"])
def test_stage_one_keeps_the_rows_every_distance_counted_keeps(shape):
    # The cut-off from the rows near a sampled guess is the one from counting every row,
    # also where the guess keeps too few (the fallback) and with filtered rows at the sentinel.
    rng = np.random.default_rng(9)
    n, bins = 200_000, 386
    dist = rng.binomial(384, 0.5, n).astype(np.uint16)
    if shape == "one_value":
        dist[:] = 190
    elif shape == "sampled_low":
        dist[: 16 * 200 : 16] = 20  # only sampled rows: the guess is too low for keep 3,001
    elif shape == "sentinels":
        dist[rng.random(n) < 0.9] = bins - 1
    for keep in (1, 500, 2_000, 3_001, 30_000):
        cumulative = np.cumsum(np.bincount(dist, minlength=bins))
        want = np.flatnonzero(dist <= int(np.searchsorted(cumulative, keep)))
        assert np.array_equal(vectors._nearest_distances(dist, keep, bins), want)


def test_quantize_keeps_each_vector_within_half_a_step():
    data = clustered(200, seed=5)
    data[3] = 0.0
    codes, scales = vectors.quantize(data, DIM)
    assert codes.dtype == np.int8 and codes.shape == (200, DIM)
    back = codes.astype(np.float32) * scales[:, None]
    assert np.all(np.abs(back - data) <= scales[:, None] / 2 + 1e-7)
    assert not codes[3].any()  # a zero vector stays zero (never nearest)
    q = unit(data[0] + data[1])
    assert np.max(np.abs(back @ q - data @ q)) < 2e-3


async def test_int8_stage_narrows_the_exact_stage(filled):
    store, data = filled
    store.vectors.tuning = dataclasses.replace(
        vectors.Tuning(), exact_below=0, stage3_min=400, final_min=16, final_per_k=2
    )
    await knn(store, data[0])
    await store.vectors.wait_filled()  # a big store's int8 copies fill in the background
    rng = np.random.default_rng(9)
    for i in rng.integers(0, len(data), 25):
        q = near(data[i], rng)
        for k in (10, 50):
            got, want = await knn(store, q, k), await exact(store, q, k)
            ids = store.vectors.candidates(q, k, (), ())
            assert len(ids) == max(16, 2 * k)  # of 2,000 stage-1 survivors
            assert [c for c, _ in got][:10] == [c for c, _ in want][:10]
            assert np.allclose([d for _, d in got][:10], [d for _, d in want][:10], atol=1e-5)


async def test_the_int8_stage_split_over_two_threads_keeps_the_same_rows(filled, monkeypatch):
    """Many survivors are scored in two halves, one on the pool's thread: the same rows."""
    store, data = filled
    store.vectors.tuning = dataclasses.replace(
        vectors.Tuning(), exact_below=0, stage3_min=400, final_min=16, final_per_k=2
    )
    await knn(store, data[0])
    await store.vectors.wait_filled()
    rng = np.random.default_rng(21)
    queries = [near(data[i], rng) for i in rng.integers(0, len(data), 10)]
    whole = [sorted(store.vectors.candidates(q, 10, (), ())) for q in queries]
    monkeypatch.setattr(vectors, "_SPLIT_INT8_ABOVE", 2)  # every survivor set here splits
    halves = [sorted(store.vectors.candidates(q, 10, (), ())) for q in queries]
    assert halves == whole


async def test_searches_before_the_int8_fill_are_exact(filled):
    """A big store publishes its codes first and fills the int8 copies in the background;
    meanwhile the bit stages narrow the stage-1 survivors without one, every stage-3 survivor
    goes to the exact stage, and results are exact."""
    store, data = filled
    store.vectors.tuning = dataclasses.replace(
        vectors.Tuning(), exact_below=0, stage3_min=400, final_min=16, final_per_k=2
    )
    gate = asyncio.Event()
    reading = store.vectors.borrow
    assert reading is not None

    @contextlib.asynccontextmanager
    async def held():  # the real reader, once the test opens the gate
        await gate.wait()
        async with reading() as conn:
            yield conn

    store.vectors.borrow = held
    rng = np.random.default_rng(11)
    queries = [near(data[i], rng) for i in rng.integers(0, len(data), 10)]
    for q in queries:
        got, want = await knn(store, q), await exact(store, q)
        assert store.vectors.loaded and len(store.vectors.candidates(q, 10, (), ())) == 400
        assert_same_hits(got, want)
    gate.set()
    await store.vectors.wait_filled()
    for q in queries:
        got, want = await knn(store, q), await exact(store, q)
        assert len(store.vectors.candidates(q, 10, (), ())) == 20
        assert [c for c, _ in got] == [c for c, _ in want]


async def test_a_half_filled_index_stays_exact(filled):
    """Survivors with an int8 copy are scored on it; the bit stages keep only the waiting
    rows' share of their count (here about half of 400), and results are exact."""
    store, data = filled
    store.vectors.tuning = dataclasses.replace(
        vectors.Tuning(), exact_below=0, stage3_min=400, final_min=16, final_per_k=2
    )
    await knn(store, data[0])
    await store.vectors.wait_filled()
    a = store.vectors._arrays
    assert a is not None
    a.scales[: a.size : 2] = 0  # every other row back to "no int8 copy yet"
    rng = np.random.default_rng(14)
    for i in rng.integers(0, len(data), 10):
        q = near(data[i], rng)
        got, want = await knn(store, q), await exact(store, q)
        assert_same_hits(got, want)
        assert 20 + 150 < len(store.vectors.candidates(q, 10, (), ())) < 20 + 250


async def test_small_stores_are_searched_exactly_in_memory(filled):
    store, data = filled
    assert store.vectors.tuning.exact_below > 3000
    await knn(store, data[0])
    assert store.vectors.loaded and store.vectors.exact and not store.vectors.use_for((), ())
    assert store.vectors.memory_bytes() >= 3000 * DIM * 4
    rng = np.random.default_rng(17)
    for i in rng.integers(0, len(data), 25):
        q = near(data[i], rng)
        for k, filters in ((10, NO_FILTERS), (50, Filters(kinds=("conversation",)))):
            got, want = await knn(store, q, k, filters), await exact(store, q, k, filters)
            assert_same_hits(got, want)
    # Asked for everything, every chunk comes back once; deep down, float rounding may swap
    # neighbours whose distances differ by less than 1e-6, as between any two exact engines.
    got, want = await knn(store, data[7], 3000), await exact(store, data[7], 3000)
    assert sorted(c for c, _ in got) == sorted(c for c, _ in want)
    assert np.allclose([d for _, d in got], [d for _, d in want], atol=1e-5)
    assert await knn(store, data[0], 10, Filters(granularities=("nothing-stored",))) == []


async def test_the_exact_search_ranks_by_int8_then_scores_floats(filled):
    # Only the best rows by int8 score reach the float stage; a row without an int8 copy yet
    # (scale 0) always does, so it is still found where it belongs.
    store, data = filled
    await knn(store, data[0])
    index = store.vectors
    a = index._arrays
    rng = np.random.default_rng(5)
    q = near(data[42], rng)
    want = await exact(store, q, 20)
    slot = int(np.flatnonzero(a.ids[: a.size] == want[0][0])[0])
    a.scales[slot] = 0
    a.int8.put(np.array([slot]), np.zeros((1, DIM), dtype=np.int8))
    assert_same_hits(index.nearest(q, 20, (), ()), want)
    approx = index._int8_scores(a, q, a.size)
    assert approx[slot] == np.inf
    assert np.count_nonzero(np.isfinite(approx)) == a.size - 1


async def test_float_copies_dropped_when_big_and_reloaded_when_small(filled):
    store, data = filled
    store.vectors.tuning = dataclasses.replace(vectors.Tuning(), exact_below=3200)
    await knn(store, data[0])
    assert store.vectors.exact
    more = clustered(1000, seed=21)
    for d in range(10):
        await put(store, f"more{d}.md", more[d * 100 : (d + 1) * 100])
    assert store.vectors.live == 4000  # 1.25 x 3200: the copies go, the cascade answers
    assert not store.vectors.exact and store.vectors.use_for((), ())
    assert store.vectors.memory_bytes() < 4000 * DIM * 4
    for d in range(0, 30, 3):
        await store.write(lambda c, d=d: c.delete_document(f"doc{d}.md"))
    assert not store.vectors.loaded  # 3000 < 3200: reloaded with copies on the next search
    q = more[500]
    assert [c for c, _ in await knn(store, q)] == [c for c, _ in await exact(store, q)]
    assert store.vectors.exact and store.vectors.live == 3000


async def test_kind_and_granularity_filters_run_inside_the_cascade(filled):
    store, data = filled
    store.vectors.tuning = dataclasses.replace(vectors.Tuning(), exact_below=0)
    for filters in (
        Filters(kinds=("conversation",)),
        Filters(granularities=("chunk",)),
        Filters(kinds=("text", "conversation"), granularities=("round",)),
        Filters(kinds=("nothing-stored",)),
    ):
        got = await knn(store, data[5], 10, filters)
        want = await exact(store, data[5], 10, filters)
        assert [c for c, _ in got] == [c for c, _ in want]
        chunks = await store.read(lambda c, ids=[c for c, _ in got]: c.chunks_by_id(ids))
        for chunk in chunks.values():
            assert not filters.kinds or chunk.kind in filters.kinds
            assert not filters.granularities or chunk.granularity in filters.granularities
    # Other filters take the exact path and still answer.
    by_source = await knn(store, data[5], 5, Filters(sources=("doc1.md",)))
    chunks = await store.read(lambda c: c.chunks_by_id([c_ for c_, _ in by_source]))
    assert len(chunks) == 5 and {ch.source for ch in chunks.values()} == {"doc1.md"}


async def test_vectors_by_id_are_the_bytes_chunks_vec_holds(filled):
    store, _ = filled
    doc2 = await store.read(lambda c: c.fetchall("SELECT id FROM chunks WHERE document_id = 3"))
    assert len(doc2) == 100
    await put(store, "doc1.md", clustered(100, seed=7))  # replaced: new chunks, new vectors
    await store.write(lambda c: c.delete_document("doc2.md"))
    rows = await store.read(lambda c: c.fetchall("SELECT chunk_id, embedding FROM chunks_vec"))
    stored = {int(r[0]): bytes(r[1]) for r in rows}
    asked = [*stored, *(int(r[0]) for r in doc2), 10**9]  # and ids with no vector
    got = await store.read(lambda c: c.vectors_by_id(asked, DIM))
    assert {cid: v.tobytes() for cid, v in got.items()} == stored


@pytest.mark.parametrize("route", ["cascade", "memory"])
async def test_index_follows_replace_delete_and_move(filled, route):
    store, data = filled
    use(store, route)
    await knn(store, data[0])  # loads the mirror
    assert store.vectors.live == 3000

    old_ids = await store.read(lambda c: c.fetchall("SELECT id FROM chunks WHERE document_id = 2"))
    fresh = clustered(100, seed=99)
    await put(store, "doc1.md", fresh)  # replace: doc1's 100 chunks get new vectors
    assert store.vectors.live == 3000
    [(top, distance)] = await knn(store, fresh[42], 1)
    assert distance == pytest.approx(0.0, abs=1e-5)
    chunk = (await store.read(lambda c: c.chunks_by_id([top])))[top]
    assert chunk.source == "doc1.md" and chunk.text == "doc1.md 42"
    stale = {int(r[0]) for r in old_ids}
    assert len(stale) == 100
    assert not stale & {c for c, _ in await knn(store, data[150], 100)}

    await store.write(lambda c: c.delete_document("doc1.md"))
    assert store.vectors.live == 2900
    gone = {c for c, _ in await knn(store, fresh[42], 50)}
    kept_sources = await store.read(lambda c: c.chunks_by_id(list(gone)))
    assert all(ch.source != "doc1.md" for ch in kept_sources.values())

    before = await knn(store, data[250], 10)
    await store.write(lambda c: c.move_document("doc2.md", "moved/doc2.md"))
    assert await knn(store, data[250], 10) == before
    [(top, _)] = await knn(store, data[250], 1)
    chunk = (await store.read(lambda c: c.chunks_by_id([top])))[top]
    assert chunk.source == "moved/doc2.md"


async def test_a_growing_index_stays_exact_across_segments(filled, monkeypatch):
    monkeypatch.setattr(segmented, "SEGMENT_ROWS", 256)
    store, data = filled
    store.vectors.tuning = dataclasses.replace(vectors.Tuning(), exact_below=0)
    await knn(store, data[0])  # loads the mirror: 3,000 rows in 12 segments
    await store.vectors.wait_filled()
    first = store.vectors._arrays
    assert first is not None and len(first.int8.segments) > 10
    more = clustered(1500, seed=11)
    for d in range(15):  # past the load's headroom (1.25x): the index grows
        await put(store, f"more{d}.md", more[d * 100 : (d + 1) * 100])
    grown = store.vectors._arrays
    assert grown is not first and grown.int8.segments[0] is first.int8.segments[0]
    rng = np.random.default_rng(12)
    for i in rng.integers(0, len(more), 10):
        q = more[i] if i % 2 else data[i]
        got, want = await knn(store, q), await exact(store, q)
        assert [c for c, _ in got] == [c for c, _ in want]


@pytest.mark.parametrize("route", ["cascade", "memory"])
async def test_a_rolled_back_write_leaves_the_index_alone(filled, route):
    store, data = filled
    use(store, route)
    before = await knn(store, data[0])

    async def broken(conn):
        await conn.delete_document("doc0.md")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        await store.write(broken)
    assert store.vectors.live == 3000
    assert await knn(store, data[0]) == before


@pytest.mark.parametrize("route", ["cascade", "memory"])
async def test_compaction_after_many_deletes(filled, route):
    store, data = filled
    use(store, route)
    await knn(store, data[0])
    for d in range(0, 30, 2):
        await store.write(lambda c, d=d: c.delete_document(f"doc{d}.md"))
    assert store.vectors.live == 1500
    assert store.vectors._dead < 1500  # compacted at least once
    q = data[1234]
    assert [c for c, _ in await knn(store, q)] == [c for c, _ in await exact(store, q)]


@pytest.mark.parametrize("route", ["cascade", "memory"])
async def test_searches_stay_correct_while_writing(filled, route):
    store, data = filled
    use(store, route)
    extra = clustered(2000, seed=5)

    async def writes():
        for i in range(20):
            await put(store, f"new{i}.md", extra[i * 100 : (i + 1) * 100])
            await store.write(lambda c, i=i: c.delete_document(f"doc{i}.md"))

    async def searches():
        for i in range(60):
            hits = await knn(store, data[i * 37 % 3000])
            assert len(hits) == 10
            assert [d for _, d in hits] == sorted(d for _, d in hits)
            await asyncio.sleep(0)

    await asyncio.gather(writes(), searches(), searches())
    total = (await store.read(lambda r: r.counts()))["chunks"]
    assert store.vectors.live == total == 3000
    q = extra[1500]
    assert [c for c, _ in await knn(store, q)] == [c for c, _ in await exact(store, q)]


async def test_migration_backfills_a_store_made_before_m002(tmp_path: Path):
    path = tmp_path / "old.db"
    conn = connect(path)
    schema.migrate(conn, schema.MIGRATIONS[:1])
    conn.execute("BEGIN")
    conn.execute("INSERT INTO meta VALUES ('model_id', 'test-384'), ('dimension', ?)", (str(DIM),))
    schema.create_vector_table(conn, DIM)
    conn.execute(
        "INSERT INTO documents (id, source, kind, content_hash, state, created_at, updated_at) "
        "VALUES (1, 'old.md', 'text', 'h', 'complete', 0, 0)"
    )
    data = clustered(500, seed=11)
    for i, v in enumerate(data, start=1):
        conn.execute(
            "INSERT INTO chunks (id, document_id, position, kind, granularity, key, text, "
            "content_hash, token_count, created_at) VALUES (?, 1, ?, 'text', 'chunk', ?, ?, "
            "'h', 1, 0)",
            (i, i, f"k{i}", f"chunk {i}"),
        )
        conn.execute(
            "INSERT INTO chunks_vec (chunk_id, embedding, kind, granularity) "
            "VALUES (?, ?, 'text', 'chunk')",
            (i, v.tobytes()),
        )
    conn.execute("UPDATE documents SET chunk_count = 500")
    conn.execute("COMMIT")
    assert schema.schema_version(conn) == 1
    conn.close()

    store = await open_store(path, model_id="test-384", dimension=DIM)
    try:
        store.vectors.tuning = dataclasses.replace(vectors.Tuning(), exact_below=0)
        rows = await store.read(
            lambda c: c.fetchall(
                "SELECT (SELECT count(*) FROM vector_codes), (SELECT count(*) FROM vector_floats)",
            )
        )
        assert tuple(rows[0]) == (500, 500)
        q = unit(data[17] + 0.1)
        assert [c for c, _ in await knn(store, q)] == [c for c, _ in await exact(store, q)]
        assert store.vectors.live == 500
    finally:
        await store.close()
    check = connect(path)
    assert schema.schema_version(check) == schema.SCHEMA_VERSION
    check.close()


@pytest.mark.parametrize("route", ["cascade", "memory"])
async def test_rebuild_refills_from_chunks_vec(filled, route):
    store, data = filled
    use(store, route)
    await knn(store, data[0])
    count = await store.write_conn(lambda c: vectors.rebuild(c, store.vectors, DIM))
    assert count == 3000
    assert not store.vectors.loaded  # reloads on the next search
    assert [c for c, _ in await knn(store, data[9])] == [c for c, _ in await exact(store, data[9])]
    assert store.vectors.live == 3000


async def test_the_index_load_does_not_count_against_the_query_time_limit(tmp_path: Path):
    s = await open_store(
        tmp_path / "t.db", model_id="test-384", dimension=DIM, query_timeout_ms=200
    )
    try:
        await put(s, "a.md", clustered(300))
        counted = "SELECT count(*) FROM vector_floats a, vector_floats b"  # ~90k steps
        async with s.reading_conn() as conn:
            async with s.vectors.untimed(conn):
                await asyncio.sleep(0.3)  # a load slower than the limit
            assert (await (await conn.execute(counted)).fetchone())[0] == 300 * 300
        with pytest.raises(QueryError, match="longer than"):
            async with s.reading_conn() as conn:
                await asyncio.sleep(0.3)  # the same time spent on the query itself
                await (await conn.execute(counted)).fetchone()
        assert await knn(s, clustered(300)[5], 3)  # the store still answers
    finally:
        await s.close()
