"""The command line without a daemon: help, import cost, exit codes, offline commands, and
`service install --dry-run`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from recalld.cli import cli, main
from recalld.cli.ingest import SOURCE_KINDS
from recalld.cli.service import render_service
from recalld.cli.templates import LAUNCHD_PLIST, SYSTEMD_UNIT

REPO = Path(__file__).resolve().parents[2]


def run_main(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(args)
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def test_import_is_light() -> None:
    code = (
        "import sys, recalld.cli; "
        "print([m for m in ('numpy', 'onnxruntime', 'markitdown', 'recalld.daemon.lifecycle',"
        " 'recalld.storage.sqlite.store') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_a_search_imports_only_what_a_client_needs(tmp_path: Path) -> None:
    code = (
        "import sys\nfrom recalld.cli import main\ntry:\n    main(['search', 'x', '--json'])\n"
        "except SystemExit as exit:\n    print(exit.code)\n"
        "print([m for m in ('asyncio', 'ssl', 'rich', 'numpy', 'recalld.cli.service',"
        " 'recalld.cli.transfer', 'recalld.client.aio') if m in sys.modules])"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RECALLD_", "XDG_"))}
    env.update({"RECALLD_HOME": str(tmp_path), "RECALLD_DAEMON__SOCKET": str(tmp_path / "s")})
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout
    # No daemon there: the JSON error, exit 3, after the same imports.
    assert out.splitlines()[-2:] == ["3", "[]"]
    assert json.loads(out.splitlines()[0])["error"]["type"] == "DaemonNotRunning"


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for command in (
        "serve",
        "search",
        "remember",
        "get",
        "forget",
        "unforget",
        "list",
        "ingest",
        "sources",
        "status",
        "errors",
        "check",
        "config",
        "service",
        "models",
        "reindex",
    ):
        assert command in result.output


def test_daemon_not_running_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(["status"], capsys)
    assert code == 3
    assert err.startswith("Error: recalld is not running") and "recalld serve" in err


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(["search"], capsys)
    assert code == 2 and "Missing argument" in err
    code, _, err = run_main(["status", "--set", "novalue"], capsys)
    assert code == 2 and "KEY=VALUE" in err


def test_a_bad_set_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(["config", "show", "--set", "embed.nope=1"], capsys)
    assert code == 2 and err.startswith("Error: unknown setting")
    code, _, err = run_main(["config", "show", "--set", "search.limit=many"], capsys)
    assert code == 2 and "'search.limit' must be a whole number, not 'many'" in err
    assert "<class" not in err


def test_a_bad_environment_value_is_an_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RECALLD_SEARCH__LIMIT", "many")
    code, _, err = run_main(["config", "show"], capsys)
    assert code == 1 and "(from env)" in err


def test_errors_are_json_under_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(["status", "--json"], capsys)
    assert code == 3 and "not running" in err
    error = json.loads(out)["error"]
    assert error["type"] == "DaemonNotRunning" and error["exit_code"] == 3
    code, out, _ = run_main(["search", "x", "--limit", "0", "--json"], capsys)
    assert code == 2 and json.loads(out)["error"]["type"] == "BadParameter"


def test_version_short_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(["-V"], capsys)
    assert code == 0 and out.startswith("recalld, version")


def test_piped_tables_are_not_cut_or_boxed(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(["config", "show"], capsys)
    assert code == 0
    assert "│" not in out and "━" not in out
    line = next(line for line in out.splitlines() if line.startswith("privacy.deny_secret_files"))
    assert line.split() == ["privacy.deny_secret_files", "True", "default", "daemon"]


def test_config_show_json_has_values_and_sources(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RECALLD_SEARCH__LIMIT", "7")
    code, out, _ = run_main(["config", "show", "--json", "--set", "embed.model=hash:64"], capsys)
    assert code == 0
    shown = json.loads(out)
    assert shown["embed.model"] == {"value": "hash:64", "source": "flag", "applies": "daemon"}
    assert shown["search.limit"] == {"value": 7, "source": "env", "applies": "request"}
    assert shown["chunk.max_tokens"]["source"] == "default"


def test_config_show_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(["config", "show"], capsys)
    assert code == 0 and "embed.model" in out and "default" in out


def test_check_offline_without_store(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(["check", "--offline"], capsys)
    assert code == 1 and "no store" in err


@pytest.mark.parametrize("platform", ["linux", "macos"])
def test_service_install_dry_run_writes_nothing(
    platform: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    user = tmp_path / "user"
    user.mkdir()
    monkeypatch.setenv("HOME", str(user))
    code, out, _ = run_main(
        ["service", "install", "--dry-run", "--platform", platform, "--set", "embed.model=local"],
        capsys,
    )
    assert code == 0
    assert f"{sys.executable} -m recalld serve --set embed.model=local" in out.replace(
        "</string>\n    <string>", " "
    ).replace("<string>", "").replace("</string>", "")
    assert "would run:" in out
    assert not any(user.rglob("*")), "dry run must not write anything"
    code, out, _ = run_main(["service", "uninstall", "--dry-run", "--platform", platform], capsys)
    assert code == 0 and "would remove" in out


def test_service_install_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(
        ["service", "install", "--dry-run", "--json", "--platform", "linux"], capsys
    )
    data = json.loads(out)
    assert code == 0 and data["dry_run"] is True
    assert data["path"].endswith(".config/systemd/user/recalld.service")
    assert data["commands"][-1] == "systemctl --user enable --now recalld.service"


def test_rendered_service_files(tmp_path: Path) -> None:
    unit = render_service("linux", tmp_path, Path("/etc/recalld.toml"))
    assert unit.path == tmp_path / ".config/systemd/user/recalld.service"
    assert "ExecStart=" in unit.text and "--config /etc/recalld.toml" in unit.text
    assert "RestartPreventExitStatus=3" in unit.text
    plist = render_service("macos", tmp_path)
    assert plist.path == tmp_path / "Library/LaunchAgents/dev.recalld.plist"
    assert "<string>serve</string>" in plist.text and "$" not in plist.text


def test_config_folder_templates_match_the_packaged_ones() -> None:
    assert (REPO / "config" / "recalld.service").read_text() == SYSTEMD_UNIT
    assert (REPO / "config" / "dev.recalld.plist").read_text() == LAUNCHD_PLIST


def test_cli_source_kinds_match_the_watcher() -> None:
    from recalld.ingest.watcher import SOURCE_KINDS as WATCHER_KINDS

    assert SOURCE_KINDS == WATCHER_KINDS


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(["--version"], capsys)
    assert code == 0 and "recalld" in out and os.sep not in out


def test_models_without_a_daemon_or_a_store(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(["models", "--json", "--set", "embed.model=hash:32"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["offline"] and data["store"]["model"] is None and data["reindex"] is None
    by_spec = {m["spec"]: m for m in data["models"]}
    assert by_spec["hash:32"]["configured"] and not by_spec["hash:32"]["in_use"]
    assert by_spec["local"]["dimension"] == 384


def test_reindex_cancel_takes_no_model(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(["reindex", "--cancel", "--model", "hash:32"], capsys)
    assert code == 2 and "--cancel takes no --model" in err
