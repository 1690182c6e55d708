"""How long an agent hook (`recalld context`) takes, as a whole process, against a running daemon.

    python -m bench.hook [--runs 30] [--model local] [--memories 200]

A daemon is started on a temporary home with `--memories` memories (half in a project, some
preferences and decisions), then these commands run `--runs` times each, interleaved so load on
a shared machine hits them alike, and their wall-clock medians are reported:

- `python`: the interpreter starting and exiting (`python -c pass`), the floor;
- `start`: `recalld context` with a Claude Code SessionStart payload (800-token budget);
- `prompt`: the same with a UserPromptSubmit payload whose prompt matches a memory;
- `down`: a prompt payload with no daemon on the socket;
- `cli`: `recalld --version`, the click command line's start-up, for comparison.

Besides wall-clock time it reports each process's CPU time (user + system, from the children's
rusage), which a loaded machine inflates far less, and the daemon's own answer time for the
`context` call over an open connection.

The target (issue 21) is a `start` median of at most 100 ms on two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import machine, write_report
from recalld.client import Client
from recalld.errors import DaemonError


def _wait_ready(client: Client, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"the daemon exited with {proc.returncode}")
        try:
            client.status()
            return
        except DaemonError:
            client.close()
        if time.monotonic() > deadline:
            raise SystemExit("the daemon did not answer")
        time.sleep(0.1)


def _seed(client: Client, project: Path, count: int) -> None:
    for i in range(count):
        if i % 10 == 0:
            client.call(
                "remember", {"text": f"I prefer option {i} for tool {i % 7}", "type": "preference"}
            )
        elif i % 10 == 1:
            client.call(
                "remember",
                {
                    "text": f"We decided to use queue {i} for the billing jobs",
                    "project": str(project),
                },
            )
        elif i % 2:
            client.call(
                "remember",
                {
                    "text": f"The billing service step {i} retries webhooks {i % 5} times",
                    "project": str(project),
                },
            )
        else:
            client.call(
                "remember", {"text": f"Fact number {i} about the garden shed and its {i % 9} tools"}
            )


def _time(
    argv: list[str], payload: bytes | None, env: dict[str, str]
) -> tuple[float, float, bytes]:
    """Wall-clock and CPU (user + system) milliseconds of one process, and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(argv, input=payload, capture_output=True, env=env, check=False)
    wall = (time.perf_counter() - started) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return wall, cpu, proc.stdout


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print (and write) its report."""
    parser = argparse.ArgumentParser(prog="python -m bench.hook", description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--model", default="local", help="embed.model of the daemon")
    parser.add_argument("--memories", type=int, default=200)
    parser.add_argument("--results", type=Path, default=Path("bench-results"))
    parser.add_argument("--cache-dir", type=Path, help="keep the built model here between runs")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="rh-", dir="/tmp"))  # short: the socket path limit
    home, socket, project = work / "home", work / "s.sock", work / "billing"
    (project / ".git").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RECALLD_", "XDG_"))}
    env.update(
        {
            "RECALLD_HOME": str(home),
            "RECALLD_EMBED__MODEL": args.model,
            "RECALLD_DAEMON__SOCKET": str(socket),
        }
    )
    if args.cache_dir:
        env["RECALLD_CACHE_DIR"] = str(args.cache_dir)
    recalld = Path(sys.executable).parent / "recalld"
    program = [str(recalld)] if recalld.exists() else [sys.executable, "-m", "recalld"]
    log = (work / "daemon.log").open("wb")
    daemon = subprocess.Popen([*program, "serve"], env=env, stdout=log, stderr=log)
    client = Client(socket, timeout=120)
    try:
        _wait_ready(client, daemon, 300)
        _seed(client, project, args.memories)
        status = client.status()

        def payload(event: str, **extra: str) -> bytes:
            body = {"session_id": "bench", "cwd": str(project), "hook_event_name": event}
            return json.dumps({**body, **extra}).encode()

        hook = [*program, "context", "--host", "claude", "--socket", str(socket)]
        down = [*program, "context", "--host", "claude", "--socket", str(work / "none.sock")]
        prompt_text = "how many times does the billing service retry webhooks"
        prompt = payload("UserPromptSubmit", prompt=prompt_text)
        cases: dict[str, tuple[list[str], bytes | None]] = {
            "python": ([sys.executable, "-c", "pass"], None),
            "start": (hook, payload("SessionStart", source="startup")),
            "prompt": (hook, prompt),
            "down": (down, prompt),
            "cli": ([*program, "--version"], None),
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        cpu: dict[str, list[float]] = {name: [] for name in cases}
        outputs: dict[str, int] = {}
        for name, (cmd, data) in cases.items():  # warm the page cache once
            outputs[name] = len(_time(cmd, data, env)[2])
        for _ in range(args.runs):
            for name, (cmd, data) in cases.items():
                wall, used, _ = _time(cmd, data, env)
                times[name].append(wall)
                cpu[name].append(used)
        # The daemon's share: the `context` call alone, over one open connection.
        answer: dict[str, list[float]] = {"start": [], "prompt": []}
        for _ in range(args.runs):
            for event, extra in (("start", {}), ("prompt", {"prompt": prompt_text})):
                started = time.perf_counter()
                client.call("context", {"event": event, "project": str(project), **extra})
                answer[event].append((time.perf_counter() - started) * 1000)
    finally:
        client.close()
        daemon.terminate()
        daemon.wait(60)
        log.close()
        shutil.rmtree(work, ignore_errors=True)

    floor = statistics.median(times["python"])
    report: dict[str, Any] = {
        "benchmark": "hook",
        "runs": args.runs,
        "model": status.get("model"),
        "memories": args.memories,
        "chunks": status.get("counts", {}).get("chunks"),
        "machine": machine(),
        "load_average": os.getloadavg(),
        "output_bytes": outputs,
        "ms": {
            name: {
                "median": round(statistics.median(values), 1),
                "p90": round(sorted(values)[int(0.9 * (len(values) - 1))], 1),
                "over_python": round(statistics.median(values) - floor, 1),
            }
            for name, values in times.items()
        },
        "cpu_ms_median": {name: round(statistics.median(v), 1) for name, v in cpu.items()},
        "daemon_answer_ms_median": {k: round(statistics.median(v), 1) for k, v in answer.items()},
    }
    path = write_report(args.results, "hook", report)
    print(json.dumps({k: report[k] for k in ("ms", "cpu_ms_median", "daemon_answer_ms_median")}))
    print(f"outputs (bytes): {outputs}; load average {report['load_average']}; report: {path}")


if __name__ == "__main__":
    main()
