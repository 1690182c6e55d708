"""The launcher's fast `recalld search` (issue 20): the same bytes and exit codes as the click
command for every form it accepts or hands over, and a plain search that imports no click,
asyncio, ssl, rich, numpy, pydantic, settings, dataclasses, typing, socket or pathlib (a
guard on what it imports, not a timing)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recalld import launcher
from recalld.cli import main
from recalld.cli.fast_search import parse
from tests.pipeline.conftest import Running

# The forms the fast path runs itself, then forms it leaves to click (help, usage errors, the
# options it does not read), and settings errors it meets after parsing.
FORMS = [
    ["pier", "--json"],
    ["pier", "boat"],
    ["pier", "-n", "1", "--explain", "--mode", "bm25", "--no-time"],
    ["--json", "pier", "--limit", "2", "--limit", "3", "--kind", "memory", "--tag", "boat"],
    ["pier", "--granularity", "memory", "--source", "memory:", "--since", "2020-01-01"],
    ["pier", "--budget", "50", "--expand", "1", "--until", "2100-01-01", "--json"],
    ["pier", "--set", "search.limit=1", "--json"],
    ["pier", "--set", "search.limit=one", "--json"],
    ["pier", "--set", "search.nope=1"],
    ["pier", "--set", "nonsense"],
    ["pier", "--since", "yesterday", "--json"],
    ["pier", "--limit", "0"],
    ["pier", "--limit", "0", "--json"],
    ["pier", "--limit=2", "--json"],
    ["pier", "--mode", "fuzzy"],
    ["pier", "--kind", "nope", "--json"],
    ["pier", "--limit"],
    ["pier", "--bogus"],
    ["--json"],
    ["-h"],
    ["pier", "--help"],
    ["pier", "--", "--json"],
    ["pier", "--project", "--json"],
    ["pier", "--config", "/"],
    ["pier", "--config", "/no/such/file.toml", "--json"],
]


def _click(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(["search", *args])
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def _launcher(
    args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["recalld", "search", *args])
    with pytest.raises(SystemExit) as info:
        launcher.main()
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


async def test_the_fast_path_prints_what_click_prints(
    daemon: Running, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async with daemon.client() as aio:
        await aio.remember("The boat is moored at pier 4", tags=["boat"])
        await aio.remember("The pier closes at dusk", tags=["boat"])
    # The socket named by `--set` (the settings are loaded), then by the environment alone
    # (nothing to resolve: the fast path does not load them).
    sets = ["--set", f"daemon.socket={daemon.socket}"]
    for form in FORMS:
        args = [*form, *sets] if "--" not in form else [*sets, *form]
        through_click = await asyncio.to_thread(_click, args, capsys)
        fast = await asyncio.to_thread(_launcher, args, capsys, monkeypatch)
        assert fast == through_click, form
    monkeypatch.setenv("RECALLD_DAEMON__SOCKET", str(daemon.socket))
    for form in FORMS:
        through_click = await asyncio.to_thread(_click, form, capsys)
        fast = await asyncio.to_thread(_launcher, form, capsys, monkeypatch)
        assert fast == through_click, form
    monkeypatch.delenv("RECALLD_DAEMON__SOCKET")
    # Nobody on the socket: the same error, the same exit code (3).
    gone = ["pier", "--json", "--set", f"daemon.socket={daemon.socket}.gone"]
    fast = await asyncio.to_thread(_launcher, gone, capsys, monkeypatch)
    assert fast == await asyncio.to_thread(_click, gone, capsys)
    assert fast[0] == 3


def test_the_fast_path_reads_only_what_it_understands() -> None:
    assert parse(["a", "-", "b", "-n", "5", "--json"]) == {
        "query": ("a", "-", "b"),
        "limit": 5,
        "mode": None,
        "expand": None,
        "budget": None,
        "since": None,
        "until": None,
        "config_file": None,
        "explain": False,
        "no_time": False,
        "as_json": True,
        "project": None,
        "sources": (),
        "kinds": (),
        "granularities": (),
        "tags": (),
        "sets": (),
    }
    # An option's value is the next argument, whatever it looks like (as in click).
    parsed = parse(["a", "--source", "--json"])
    assert parsed is not None and parsed["sources"] == ("--json",) and not parsed["as_json"]
    for handed_over in (
        ["a", "-n5"],
        ["a", "--limit", "1001"],
        ["a", "--limit", "+5"],
        ["a", "--project"],
        ["a", "--", "b"],
        ["--json"],
        ["a", "-h"],
    ):
        assert parse(handed_over) is None, handed_over


async def test_a_plain_search_imports_only_what_a_client_needs(daemon: Running) -> None:
    async with daemon.client() as aio:
        await aio.remember("The boat is moored at pier 4")
    code = (
        "import sys\nfrom recalld import launcher\n"
        "sys.argv = ['recalld', 'search', 'pier', '--json']\n"
        "try:\n    launcher.main()\nexcept SystemExit as exit:\n    print(exit.code)\n"
        "print([m for m in ('click', 'asyncio', 'ssl', 'rich', 'numpy', 'pydantic',"
        " 'recalld.cli.app', 'recalld.client.aio', 'recalld.config', 'recalld.types',"
        " 'dataclasses', 'inspect', 'datetime', 'tomllib', 'hmac', 'typing', 'recalld.masking',"
        " 'socket', 'selectors', 'pathlib')"
        " if m in sys.modules])"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RECALLD_", "XDG_"))}
    env.update({"RECALLD_HOME": str(daemon.home), "RECALLD_DAEMON__SOCKET": str(daemon.socket)})
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=Path(__file__).parent,
    )
    lines = done.stdout.splitlines()
    assert lines[-2:] == ["0", "[]"], done.stdout[-2000:] + done.stderr[-2000:]
    assert '"text": "The boat is moored at pier 4"' in done.stdout


async def test_the_cli_search_benchmark_runs_against_a_daemon(daemon: Running) -> None:
    # `python -m bench.cli_search` end to end (figures are not checked: speed is measured by
    # running it, not in tests); `--tree` runs this checkout's src beside the installed one.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RECALLD_", "XDG_"))}
    env.update({"RECALLD_HOME": str(daemon.home), "RECALLD_DAEMON__SOCKET": str(daemon.socket)})
    checkout = Path(__file__).parents[2]
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "bench.cli_search", "--runs", "1", "--tree", "src"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        cwd=checkout,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert set(report["cpu_ms_median"]) == {
        "python -c pass",
        "recalld",
        "PYTHONPATH=src",
    }
