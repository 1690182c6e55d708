"""The benchmark commands run end to end on tiny data sets made here (with the test embedder)."""

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench import search_trees
from bench.__main__ import main


def make_beir(folder: Path) -> None:
    (folder / "qrels").mkdir(parents=True)
    docs = {
        "d1": ("Aspirin", "Aspirin reduces the risk of heart attack in adults."),
        "d2": ("Vitamin D", "Vitamin D deficiency is linked to weaker bones."),
        "d3": ("Sleep", "Short sleep duration impairs memory consolidation."),
    }
    with (folder / "corpus.jsonl").open("w") as f:
        for i, (title, text) in docs.items():
            f.write(json.dumps({"_id": i, "title": title, "text": text}) + "\n")
    queries = {"q1": "aspirin heart attack", "q2": "bones vitamin", "q3": "memory sleep"}
    with (folder / "queries.jsonl").open("w") as f:
        for i, text in queries.items():
            f.write(json.dumps({"_id": i, "text": text}) + "\n")
    (folder / "qrels" / "train.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq3\td3\t1\n"
    )


def test_beir_command_reports_every_mode(tmp_path: Path):
    make_beir(tmp_path / "beir")
    result = CliRunner().invoke(
        main,
        [
            "beir",
            str(tmp_path / "beir"),
            "--json",
            "--results",
            str(tmp_path / "out"),
            "--store-dir",
            str(tmp_path / "store"),
            "--set",
            "embed.model=hash:64",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert set(report["modes"]) == {"bm25", "vector", "hybrid", "full"}
    assert report["modes"]["bm25"]["ndcg@10"] == 1.0
    assert set(report["significance"]["full"]) == {"vs bm25", "vs vector"}
    assert set(report["significance"]["full"]["vs bm25"]) == {"ndcg@10", "recall@10", "mrr@10"}
    assert report["documents"] == 3
    assert list((tmp_path / "out").glob("beir-*.json"))


def make_locomo(path: Path) -> None:
    sample = {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a puppy called Biscuit."},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "Lovely! What breed is Biscuit?"},
                {"speaker": "Ana", "dia_id": "D1:3", "text": "Biscuit is a beagle."},
                {"speaker": "Ben", "dia_id": "D1:4", "text": "I started learning the cello."},
            ],
        },
        "qa": [
            {"question": "What breed is Biscuit?", "evidence": ["D1:3"], "category": 4},
            {
                "question": "Which instrument does Ben learn, the cello?",
                "evidence": ["D1:4"],
                "category": 1,
            },
            {"question": "What is Ana's favourite volcano?", "category": 5},
        ],
    }
    path.write_text(json.dumps([sample]))


def test_locomo_command_reports_categories_and_rejection(tmp_path: Path):
    make_locomo(tmp_path / "locomo.json")
    result = CliRunner().invoke(
        main,
        [
            "locomo",
            str(tmp_path / "locomo.json"),
            "--json",
            "--mode",
            "bm25",
            "--mode",
            "full",
            "--variant",
            "rrf:fusion=rrf",
            "--results",
            str(tmp_path / "out"),
            "--set",
            "embed.model=hash:64",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    full = report["modes"]["full"]
    assert set(full) >= {"single-hop", "multi-hop", "adversarial", "overall"}
    assert full["overall"]["questions"] == 2
    assert 0.0 <= full["adversarial"]["rejected"] <= 1.0
    assert report["modes"]["bm25"]["single-hop"]["recall@10"] == 1.0
    assert report["modes"]["bm25"]["single-hop"]["words@600"] == 1.0
    assert set(report["modes"]["full"]["overall"]) >= {"words@150", "words@300", "words@600"}
    # full and the variant are each compared with bm25 on every paired figure.
    assert set(report["significance"]) == {"full", "rrf"}
    against = report["significance"]["rrf"]["vs bm25"]
    assert set(against) == {"recall@5", "recall@10", "words@150", "words@300", "words@600"}
    assert 0.0 < against["recall@5"]["p"] <= 1.0
    assert report["modes"]["rrf"]["overall"]["questions"] == 2


def test_ablation_runs_every_variant_on_both_data_sets(tmp_path: Path):
    make_beir(tmp_path / "beir")
    make_locomo(tmp_path / "locomo.json")
    result = CliRunner().invoke(
        main,
        [
            "ablation",
            "--beir",
            str(tmp_path / "beir"),
            "--locomo",
            str(tmp_path / "locomo.json"),
            "--variant",
            "freq-x10:frequency_weight=0.5",
            "--history",
            "split",
            "--json",
            "--results",
            str(tmp_path / "out"),
            "--store-dir",
            str(tmp_path / "store"),
            "--set",
            "embed.model=hash:64",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    names = {"baseline", "recency", "frequency", "importance", "freq-x10"}
    assert set(report["variant_settings"]) == names
    assert report["variant_settings"]["freq-x10"] == {"frequency_weight": 0.5}
    beir = report["beir"]
    assert set(beir["variants"]) == names
    # Three queries: q2 is history, q1 and q3 are measured; q2's top hits were counted.
    assert (beir["history_queries"], beir["measured_queries"]) == (1, 2)
    assert beir["retrievals_counted"] > 0
    assert beir["variants"]["baseline"]["queries"] == 2
    # Importance is flat on a static corpus: the re-rank is monotone, the figures equal.
    assert beir["variants"]["importance"]["ndcg@10"] == beir["variants"]["baseline"]["ndcg@10"]
    loco = report["locomo"]
    assert set(loco["variants"]) == names
    assert (loco["history_queries"], loco["measured_queries"]) == (1, 2)
    assert "recall@5" in loco["variants"]["baseline"]["overall"]
    assert list((tmp_path / "out").glob("ablation-*.json"))

    table = CliRunner().invoke(
        main,
        [
            "ablation",
            "--locomo",
            str(tmp_path / "locomo.json"),
            "--only",
            "recency",
            "--results",
            str(tmp_path / "out"),
            "--store-dir",
            str(tmp_path / "store"),
            "--set",
            "embed.model=hash:64",
        ],
    )
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].split()[:3] == ["variant", "R@5", "all"]
    assert [line.split()[0] for line in lines[1:3]] == ["baseline", "recency"]


def test_ablation_needs_a_data_set_and_known_variants(tmp_path: Path):
    result = CliRunner().invoke(main, ["ablation"])
    assert result.exit_code == 2 and "--beir" in result.output
    make_locomo(tmp_path / "l.json")
    bad = CliRunner().invoke(
        main, ["ablation", "--locomo", str(tmp_path / "l.json"), "--only", "x"]
    )
    assert bad.exit_code == 2
    bad = CliRunner().invoke(
        main, ["ablation", "--locomo", str(tmp_path / "l.json"), "--variant", "nocolon"]
    )
    assert bad.exit_code == 2


def test_links_command_compares_auto_links_on_and_off(tmp_path: Path):
    folder = tmp_path / "logs"
    folder.mkdir()
    make_locomo(folder / "a.json")
    (folder / "note.md").write_text("# Ana\n\nAna adopted a puppy called Biscuit.\n")
    result = CliRunner().invoke(
        main,
        [
            "links",
            str(folder),
            "--rounds",
            "1",
            "--json",
            "--results",
            str(tmp_path / "out"),
            "--set",
            "embed.model=hash:64",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["files"] == 2 and report["chunks"] > 0
    # Parent and temporal links with links on; none at all with them off.
    assert report["links_on"]["links"] > 0 and report["links_off"]["links"] == 0
    assert report["store_ratio"] > 0 and report["ingest_ratio"] > 0


def test_perf_times_recalld_in_process_over_the_socket_and_as_a_process(tmp_path: Path):
    make_beir(tmp_path / "beir")
    result = CliRunner().invoke(
        main,
        [
            "perf",
            "--data",
            str(tmp_path / "beir"),
            "--blocks",
            "2",
            "--cli-runs",
            "2",
            "--no-peer",
            "--json",
            "--results",
            str(tmp_path / "out"),
            "--store-dir",
            str(tmp_path / "store"),
            "--set",
            "embed.model=hash:64",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["queries"] == 3 and report["documents"] == 3
    assert set(report["search"]) == {"in_process", "socket"}
    assert report["search"]["in_process"]["p50_ms"] > 0
    assert report["cli"]["recalld"]["runs"] == 2
    assert report["ndcg@10"]["recalld"] == 1.0
    assert {"embed_ms", "total_ms"} <= set(report["stages_ms_p50"])
    assert report["rss_mb"]["daemon"]["VmRSS"] > 0
    assert report["socket_transport_ms"]["p50_ms"] > 0


def test_perf_without_the_peer_says_how_to_set_it_up(tmp_path: Path):
    make_beir(tmp_path / "beir")
    result = CliRunner().invoke(
        main, ["perf", "--data", str(tmp_path / "beir"), "--peer", str(tmp_path / "none")]
    )
    assert result.exit_code != 0
    assert "setup.sh" in result.output


def test_locomo_budget_recall_skips_what_does_not_fit():
    from bench.locomo import budget_recall

    hits = [({"D1:1"}, 100), ({"D1:2", "D1:3"}, 300), ({"D1:3"}, 40)]
    # 150 words: the 300-word hit is skipped, the later small one still fits.
    assert budget_recall(hits, {"D1:1", "D1:3"}, 150) == 1.0
    assert budget_recall(hits, {"D1:2"}, 150) == 0.0
    assert budget_recall(hits, {"D1:2"}, 600) == 1.0
    assert budget_recall(hits, {"D1:1", "D1:2"}, 99) == 0.0


def test_compare_tests_two_reports_of_the_same_questions(tmp_path: Path):
    make_locomo(tmp_path / "locomo.json")
    reports = []
    for name, granularity in (("a", "round"), ("b", "all")):
        args = ["locomo", str(tmp_path / "locomo.json"), "--granularity", granularity]
        args += ["--mode", "bm25", "--json", "--results", str(tmp_path / name)]
        result = CliRunner().invoke(main, [*args, "--set", "embed.model=hash:64"])
        assert result.exit_code == 0, result.output
        reports.append(str(next((tmp_path / name).glob("locomo-*.json"))))
    result = CliRunner().invoke(main, ["compare", *reports, "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)["bm25"]
    assert set(figures) == {"recall@5", "recall@10", "words@150", "words@300", "words@600"}
    assert 0.0 < figures["recall@5"]["p"] <= 1.0
    assert figures["words@600"]["delta"] == round(
        figures["words@600"]["second"] - figures["words@600"]["first"], 4
    )


def test_answerability_threshold_is_chosen_on_the_other_conversations():
    from bench.locomo import ANSWERABILITY_K, answerability_leave_one_out

    def record(conv: str, category: int, ownership: float | None) -> dict:
        return {
            "conversation": conv,
            "category": category,
            **{f"ownership@{k}": ownership for k in ANSWERABILITY_K},
        }

    records = []
    for conv in ("c1", "c2", "c3"):
        records += [record(conv, 5, 0.0)] * 4 + [record(conv, 5, 0.9)] * 4
        records += [record(conv, 4, 1.0)] * 40 + [record(conv, 1, None)] * 10
    out = answerability_leave_one_out(records)
    assert out["rejected"] == 0.5 and out["false_rejection"] == 0.0
    assert out["unanswerable"] == 24 and out["answerable"] == 150
    assert set(out["chosen"]) == {"c1", "c2", "c3"}
    # Answerable questions at ownership 0.15 in c3: a threshold above it would reject them, so
    # the conversations calibrated with c3 keep theirs below it.
    records += [record("c3", 2, 0.15)] * 30
    out = answerability_leave_one_out(records)
    assert out["chosen"]["c1"]["threshold"] < 0.15 and out["chosen"]["c2"]["threshold"] < 0.15
    assert out["false_rejection"] == 0.0  # c3's threshold comes from c1 and c2: 0.01 (tie)


def test_answerability_judged_with_what_each_store_learned_itself():
    from bench.locomo import ANSWERABILITY_K, answerability_self_calibrated

    def record(conv: str, category: int, ownership: float | None) -> dict:
        return {
            "conversation": conv,
            "category": category,
            **{f"ownership@{k}": ownership for k in ANSWERABILITY_K},
        }

    records = [record("c1", 5, 0.0), record("c1", 4, 0.25), record("c1", 4, None)]
    records += [record("c2", 5, 0.0), record("c2", 1, 1.0)]
    k = ANSWERABILITY_K[0]
    learned = {"k": k, "threshold": 0.3, "queries": 300, "rejected": 0.3, "false_rejection": 0.0}
    tunings = {
        "c1": {"answerability": {"all": {**learned, "threshold": 0.1}, "round": learned}},
        "c2": {"answerability": {"all": learned}},  # no round threshold: its `all` one
    }
    out = answerability_self_calibrated(records, tunings, "round")
    assert out["learned"] == {"c1": {"k": k, "threshold": 0.3}, "c2": {"k": k, "threshold": 0.3}}
    assert out["rejected"] == 1.0 and out["false_rejection"] == round(1 / 3, 4)
    out = answerability_self_calibrated(records, tunings, "all")
    assert out["rejected"] == 1.0 and out["false_rejection"] == 0.0


def test_beir_corpus_limit_keeps_the_queries_it_can_answer(tmp_path: Path):
    make_beir(tmp_path / "beir")
    args = ["beir", str(tmp_path / "beir"), "--corpus-limit", "2", "--mode", "bm25", "--json"]
    args += ["--results", str(tmp_path / "out"), "--set", "embed.model=hash:64"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["documents"] == 2 and report["queries"] == 2
    assert report["modes"]["bm25"]["queries"] == 2


def test_beir_calibrates_with_the_seed_given(tmp_path: Path):
    make_beir(tmp_path / "beir")
    args = ["beir", str(tmp_path / "beir"), "--mode", "bm25", "--calibrate", "--json"]
    args += ["--calibration-seed", "3", "--results", str(tmp_path / "out")]
    result = CliRunner().invoke(main, [*args, "--set", "embed.model=hash:64"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["calibration_seed"] == 3 and report["calibration"]["chunks"] >= 3
    assert set(report["modes"]) == {"bm25", "calibrated"}


def test_calibrate_command_times_one_calibration_of_a_kept_store(tmp_path: Path):
    make_beir(tmp_path / "beir")
    hashed = ["--set", "embed.model=hash:64"]
    args = ["beir", str(tmp_path / "beir"), "--mode", "bm25", "--json", *hashed]
    args += ["--results", str(tmp_path / "out"), "--store-dir", str(tmp_path / "store")]
    assert CliRunner().invoke(main, args).exit_code == 0
    args = ["calibrate", "--store-dir", str(tmp_path / "store"), "--pseudo-queries", "5", *hashed]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["documents"] == 3 and report["chunks"] >= 3
    assert report["seconds"] >= 0 and len(report["load_before"]) == 3
    assert report["chosen"] == {}  # three abstracts: too few chunks to calibrate on


def test_ingest_command_in_slices_through_the_api_and_a_daemon(tmp_path: Path):
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(40):
        (folder / f"n{i:02d}.md").write_text(f"# Note {i}\n\nOtters hold hands, entry {i}.\n")
    for via in ("api", "daemon"):
        # A short store folder: the daemon's socket lives there (the 100-byte limit).
        store = Path(tempfile.mkdtemp(prefix="bi-", dir="/tmp"))
        try:
            args = ["ingest", str(folder), "--via", via, "--store-dir", str(store), "--json"]
            args += ["--results", str(tmp_path / "out"), "--set", "embed.model=hash:64"]
            args += ["--slices", "3"]  # 14, 13 and 13 files, each slice then the model
            result = CliRunner().invoke(main, args)
        finally:
            shutil.rmtree(store, ignore_errors=True)
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        assert (report["via"], report["files"], report["chunks"]) == (via, 40, 40)
        assert report["model_only"]["texts"] == 40
        assert report["pipeline"]["cpu_seconds"] > 0 and report["cpu_ratio"] > 0
        assert report["slices"] == 3 and len(report["slice_ratios"]) == 3


def test_ingest_rounds_report_the_median_of_their_ratios(tmp_path: Path):
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(12):
        (folder / f"n{i:02d}.md").write_text(f"# Note {i}\n\nBadgers dig, entry {i}.\n")
    args = ["ingest", str(folder), "--rounds", "3", "--store-dir", str(tmp_path / "store")]
    args += ["--json", "--results", str(tmp_path / "out"), "--set", "embed.model=hash:64"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    rounds = report["rounds"]
    assert len(rounds) == 3 and report["chunks"] == 12
    ratios = sorted(r["overhead_ratio"] for r in rounds)
    assert report["overhead_ratio"] == round(ratios[1], 3)


def test_search_trees_times_two_checkouts_on_copies_of_one_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    make_beir(tmp_path / "beir")
    store = tmp_path / "store"
    hashed = ["--set", "embed.model=hash:64"]
    built = CliRunner().invoke(
        main, ["beir", str(tmp_path / "beir"), "--json", "--store-dir", str(store), *hashed]
    )
    assert built.exit_code == 0, built.output
    before = (store / "data" / "recalld.db").read_bytes()
    tree = Path(__file__).resolve().parents[2]
    search_trees.main(
        [str(store), str(tmp_path / "beir"), "--tree", str(tree), "--tree", str(tree),
         "--limit", "3", "--blocks", "2", *hashed]
    )  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert report["queries"] == 3
    first, second = report["trees"].values()
    assert first["p50_ratio"] == 1.0 and first["same_ids"] and second["same_ids"]
    assert set(first["stages_ms_p50"]) >= {"embed_ms", "vector_ms", "bm25_ms", "total_ms"}
    assert (store / "data" / "recalld.db").read_bytes() == before  # the trees search copies
