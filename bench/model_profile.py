"""Where the packaged int8 model's time goes, per onnxruntime op, what the
SkipLayerNormalization fusion that the embedder turns off would cost, and what its fused
attention (one QAttention node per layer) saves, and what quantising the one MatMul it keeps
in fp32 (layer 0's output projection) would save and cost.

    python -m bench.model_profile ../shared/data/scifact [DOCS] [ROUNDS]

On the chunks of the first DOCS SciFact abstracts (cut as ingest cuts them), each text run
alone as the embedder runs it: the share of kernel time per op type (onnxruntime's profiler,
one intra-op thread, one run at a time), then the CPU per text with the fusion off (the
embedder's session) and on, with the attention in standard nodes (the graph before
`fused_attention`) and with every MatMul int8, in alternating rounds of two runs in flight, and
how far their vectors are from each other and from fp32's.
"""

from __future__ import annotations

import collections
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from safetensors.numpy import load_file

from bench.int8_batching import texts as scifact_texts
from recalld.embeddings import local
from recalld.embeddings.onnx_graph import BertConfig, build_bert_graph


def session(graph: Path, threads: int, *, fused: bool, profile: str | None = None) -> Any:
    """The embedder's session; `fused`: with onnxruntime's SkipLayerNormFusion, as graph
    version 2 runs it (the same graph file)."""
    version = 2 if fused else local.GRAPH_VERSION
    return local.open_session(graph, threads, version=version, profile=profile)


def run_each(sess: Any, ids: list[list[int]], in_flight: int) -> npt.NDArray[np.float32]:
    """Each text's vector, one text per run, `in_flight` runs at a time."""

    def one(row: list[int]) -> npt.NDArray[np.float32]:
        x = np.array([row], dtype=np.int64)
        (vectors,) = sess.run(["embeddings"], {"input_ids": x, "attention_mask": np.ones_like(x)})
        return np.asarray(vectors[0], dtype=np.float32)

    with ThreadPoolExecutor(in_flight) as pool:
        return np.stack(list(pool.map(one, ids)))


def op_shares(graph: Path, ids: list[list[int]], fused: bool, workdir: Path) -> dict[str, float]:
    """Each op type's share of kernel time (per cent), one thread, one run at a time."""
    sess = session(graph, 1, fused=fused, profile=str(workdir / f"fused-{fused}"))
    run_each(sess, ids, 1)
    times: collections.Counter[str] = collections.Counter()
    for event in json.loads(Path(sess.end_profiling()).read_text()):
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            times[event["args"]["op_name"]] += event["dur"]
    total = sum(times.values())
    return {op: round(100 * t / total, 1) for op, t in times.most_common(10)}


def _cosines(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> dict[str, float]:
    cos = np.sum(a * b, axis=1)
    return {"mean": round(float(cos.mean()), 5), "min": round(float(cos.min()), 5)}


def main(folder: Path, docs: int = 80, rounds: int = 3) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="model-profile-"))
    embedder = local.LocalEmbedder(cache_dir=workdir)
    embedder.load()
    tokenizer = embedder._load().tokenizer
    chunks = scifact_texts(folder, docs, 0, embedder.count_tokens)
    ids = [local._truncated(e.ids) for e in tokenizer.encode_batch_fast(chunks)]
    graph = embedder.graph_path
    report: dict[str, Any] = {
        "texts": len(ids),
        "mean_tokens": round(float(np.mean([len(i) for i in ids])), 1),
        "onnxruntime": ort.__version__,
        "op_shares_fusion_off": op_shares(graph, ids, False, workdir),
        "op_shares_fusion_on": op_shares(graph, ids, True, workdir),
    }
    unfused = local.LocalEmbedder(cache_dir=workdir, fused_attention=False)
    unfused.load()
    all_int8 = workdir / "all-int8.onnx"
    weights = load_file(str(embedder.model_dir / "model.safetensors"))
    config = BertConfig.from_json(json.loads((embedder.model_dir / "config.json").read_text()))
    local._quantize(build_bert_graph(weights, config, attention_op=True), all_int8, keep_fp32=())
    opened = {
        "fusion off (default)": session(graph, embedder.threads, fused=False),
        "fusion on": session(graph, embedder.threads, fused=True),
        "attention in standard nodes": session(unfused.graph_path, embedder.threads, fused=False),
        "every MatMul int8": session(all_int8, embedder.threads, fused=False),
    }
    vectors = {name: run_each(sess, ids, local.RUNS_IN_FLIGHT) for name, sess in opened.items()}
    off, on, standard, every_int8 = vectors.values()
    report["attention_fused_same_bits"] = bool(np.array_equal(off, standard))
    fp32 = local.LocalEmbedder(quantize=False, cache_dir=workdir).embed(chunks)
    report["cosine_off_to_on"] = _cosines(off, on)
    report["cosine_every_int8_to_default"] = _cosines(every_int8, off)
    report["cosine_to_fp32"] = {name: _cosines(v, fp32) for name, v in vectors.items()}
    cpu: dict[str, list[float]] = {name: [] for name in opened}
    for _ in range(rounds):
        for name, sess in opened.items():
            started = time.process_time()
            run_each(sess, ids, local.RUNS_IN_FLIGHT)
            cpu[name].append(1000 * (time.process_time() - started) / len(ids))
    report["cpu_ms_per_text"] = {name: round(statistics.median(v), 2) for name, v in cpu.items()}
    default = cpu["fusion off (default)"]
    # Each round's ratio to the default's time in the same round, then their median.
    report["cpu_ratio_to_default"] = {
        name: round(statistics.median(t / d for t, d in zip(v, default, strict=True)), 3)
        for name, v in cpu.items()
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    args = sys.argv[1:]
    main(Path(args[0]), *(int(a) for a in args[1:3]))
