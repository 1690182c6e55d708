"""`recalld tune` for real: the packaged model tuned on a tiny store, through the eval gate, the
ONNX rebuild and the online reindex; an interrupted run resumes; a losing model is refused."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from recalld.api import AsyncMemory
from recalld.config import load_settings
from recalld.embeddings import tuned
from recalld.embeddings.local import LocalEmbedder
from recalld.tune import run, train
from recalld.tune.run import TuneOptions

from .corpus import notes
from .options import OPTIONS

pytestmark = [pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture
async def memory(tmp_path: Path, model_cache: Path) -> AsyncIterator[AsyncMemory]:
    env = {"RECALLD_HOME": str(tmp_path), "RECALLD_CACHE_DIR": str(model_cache)}
    settings = load_settings(None, env).settings
    mem = await AsyncMemory.open(settings, embedder=LocalEmbedder(cache_dir=model_cache))
    for name, text in notes(60).items():
        await mem.add_text(text, source=f"note:{name}", name=name)
    yield mem
    await mem.close()


async def _tune(memory: AsyncMemory, options: TuneOptions, **kw: Any) -> dict[str, Any]:
    return await run.tune(
        memory.store,
        memory.embedder,
        "local",
        memory.settings.tuned_model_dir,
        options,
        **kw,
    )


async def test_dry_run_mines_disagreements_and_trains_nothing(memory: AsyncMemory) -> None:
    result = await _tune(memory, dataclasses.replace(OPTIONS, dry_run=True))
    mining = result["mining"]
    assert result["dry_run"] and mining["triples"] > 0 and mining["eval_queries"] > 0
    assert mining["triples"] == mining["vector_missed"] + mining["vector_lower"]
    assert result["estimate_seconds"] > 0
    assert not memory.settings.tuned_model_dir.exists() or not list(
        memory.settings.tuned_model_dir.glob("tuned-*")
    )


async def test_tuning_beats_the_base_and_goes_live_through_reindex(memory: AsyncMemory) -> None:
    result = await _tune(memory, OPTIONS)
    gate = result["gate"]
    print(json.dumps(result, indent=1))
    assert gate["accepted"], gate
    assert gate["mrr_after"] > gate["mrr_before"]
    spec = result["model"]
    assert tuned.is_tuned(spec)
    folder = tuned.folder_of(spec, memory.settings.tuned_model_dir)
    manifest = tuned.read_manifest(folder)
    assert manifest["base"] == "local" and manifest["settings"]["learning_rate"] == 5e-5
    assert tuned.sha256_of(folder / "model.safetensors") == manifest["weights_sha256"]
    recorded = await memory.store.read(lambda c: c.meta_value(run.META_PREFIX + spec))
    assert recorded is not None and json.loads(recorded)["gate"]["accepted"]
    # The work folder is gone: the next run starts afresh.
    assert not (memory.settings.tuned_model_dir / run.WORK).exists()

    async def quiet(note: dict[str, Any]) -> None:
        pass

    await memory.reindexer.start(spec)
    await memory.reindexer.wait(quiet)
    assert memory.store.model_id == manifest["model_id"]
    assert memory.embedder.model_id == manifest["model_id"]
    hits = await memory.search("spare valve in the north storage room", mode="vector")
    assert hits.hits

    # A damaged graph is refused, not loaded.
    graph = next(folder.glob("*.onnx"))
    graph.write_bytes(graph.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(Exception, match="checksum"):
        tuned.tuned_embedder(spec, memory.settings.tuned_model_dir)


async def test_an_interrupted_run_resumes_from_its_checkpoint(memory: AsyncMemory) -> None:
    stop = threading.Event()
    steps: list[int] = []

    async def progress(note: dict[str, Any]) -> None:
        if note.get("phase") == "training":
            steps.append(note["step"])
            if note["step"] >= 2:
                stop.set()

    with pytest.raises(train.Interrupted):
        await _tune(memory, OPTIONS, progress=progress, stop=stop)
    work = memory.settings.tuned_model_dir / run.WORK
    assert (work / train.CHECKPOINT).exists() and (work / run.RUN).exists()
    result = await _tune(memory, run.with_budget(OPTIONS, max_steps=4))
    assert result["training"]["resumed_from"] == 2
    assert result["training"]["steps"] == 4
    assert not work.exists()


async def test_a_model_that_does_not_win_is_refused(memory: AsyncMemory) -> None:
    # A learning rate this high wrecks the model; the gate must keep the current one.
    result = await _tune(memory, run.with_budget(OPTIONS, learning_rate=0.05, max_steps=3))
    gate = result["gate"]
    assert not gate["accepted"] and "does not beat" in gate["reason"]
    assert gate["mrr_after"] <= gate["mrr_before"]
    assert "model" not in result
    assert not list(memory.settings.tuned_model_dir.glob("tuned-*"))
    assert not list(memory.settings.tuned_model_dir.glob(".tuned-*"))
    assert memory.store.model_id.startswith("minilm-l6-v2/")
