"""`python -m bench.hook` runs end to end on the test embedder and writes its report
(figures are not checked: speed is measured by running it, not in tests)."""

import json
import subprocess
import sys
from pathlib import Path


def test_hook_benchmark_reports_every_command(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable, "-m", "bench.hook", "--runs", "1", "--model", "hash:64",
            "--memories", "12", "--results", str(out),
        ],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[2],  # the checkout, where `bench` is importable
        timeout=300,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    [report_path] = out.glob("hook-*.json")
    report = json.loads(report_path.read_text())
    assert set(report["ms"]) == {"python", "start", "prompt", "down", "cli"}
    assert report["output_bytes"]["start"] > 0 and report["output_bytes"]["down"] == 0
    assert set(report["daemon_answer_ms_median"]) == {"start", "prompt"}
