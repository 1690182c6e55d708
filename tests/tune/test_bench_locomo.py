"""`python -m bench tune --locomo`, at a tiny size: three conversations made of the tuning
corpus's notes are tuned on, then their questions are scored before and after the reindex."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import pytest

from bench import tune as tune_bench
from bench.common import bench_settings
from recalld.embeddings import tuned
from recalld.storage.registry import stored_model

from .corpus import TEMPLATES, notes
from .options import OPTIONS as TUNE_OPTIONS

pytestmark = [pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(600)]

# The tuning tests' options, with the cheaper training settings the bench offers.
OPTIONS = dataclasses.replace(
    TUNE_OPTIONS,
    train=dataclasses.replace(TUNE_OPTIONS.train, frozen_layers=2, length_group=4),
)
QUESTIONS = 5  # per conversation


def conversation(sample_id: str, seed: int) -> dict[str, Any]:
    """Ana and Ben read the notes to each other, a session of 16 turns per four notes; a
    question per note asks where its spare valve is kept, the turn that says so its evidence."""
    sessions: dict[str, Any] = {"speaker_a": "Ana", "speaker_b": "Ben"}
    qa = []
    turns: list[dict[str, str]] = []
    session = 1
    spare = TEMPLATES[2].split("{a}")[0]  # "A spare "
    for body in notes(16, seed).values():
        for sentence in body.replace(". ", ".\n").split("\n"):
            if not sentence.strip():
                continue
            dia_id = f"D{session}:{len(turns) + 1}"
            turns.append(
                {"speaker": ("Ana", "Ben")[len(turns) % 2], "dia_id": dia_id, "text": sentence}
            )
            if sentence.startswith(spare):
                rig = sentence.split(" the ")[1].split(" rig")[0]
                qa.append(
                    {
                        "question": f"Where is the spare valve for the {rig} rig kept?",
                        "evidence": [dia_id],
                        "category": 4,
                    }
                )
        if len(turns) >= 16:
            sessions[f"session_{session}"] = turns
            sessions[f"session_{session}_date_time"] = f"1:56 pm on {session} May, 2023"
            session, turns = session + 1, []
    random.Random(seed).shuffle(qa)
    return {"sample_id": sample_id, "conversation": sessions, "qa": qa[:QUESTIONS]}


async def test_locomo_path_scores_both_modes_before_and_after(
    tmp_path: Path, model_cache: Path
) -> None:
    file = tmp_path / "locomo.json"
    file.write_text(json.dumps([conversation(f"conv-{s}", s) for s in (7, 8, 9)]))
    report = await tune_bench.run_locomo(
        file, tmp_path / "stores", {"cache_dir": str(model_cache)}, OPTIONS
    )
    mining = report["tune"]["mining"]
    assert mining["triples"] > 0 and mining["eval_queries"] > 0
    assert report["tune"]["gate"]["accepted"], report["tune"]["gate"]
    for when in ("before", "after"):
        for mode in tune_bench.MODES:
            figures = report[when][mode]
            assert figures["questions"] == 3 * QUESTIONS
            assert 0 <= figures["recall@5"] <= 1 and 0 <= figures["words@300"] <= 1
    for mode in tune_bench.MODES:
        for metric in ("recall@5", "words@300"):
            found = report["significance"][mode][metric]
            assert 0 < found["p"] <= 1
            delta = report["after"][mode][metric] - report["before"][mode][metric]
            assert found["delta"] == pytest.approx(delta, abs=1e-3)
    # The store was switched onto the tuned model by its online reindex.
    assert report["reindex_seconds"] > 0
    spec = report["tune"]["model"]
    settings = bench_settings(tmp_path / "stores", {})
    manifest = tuned.read_manifest(tuned.folder_of(spec, settings.tuned_model_dir))
    assert stored_model(settings.store_location) == (spec, manifest["model_id"], 384)
