"""`recalld service install|uninstall` into a temp HOME (issue 17): the installer's RECALLD_*
environment goes into the unit and the plist, a missing user bus is explained, and uninstall
removes what install wrote even when the service manager cannot be reached.

`systemctl` is a small script on PATH (a fake at the process boundary): it records its
arguments and, when asked, fails the way systemctl does without a user bus.
"""

from __future__ import annotations

import os
import plistlib
import stat
from pathlib import Path

import pytest

from recalld.cli import main
from recalld.cli.service import carried_environment, render_service

NO_BUS = "Failed to connect to bus: No medium found"


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(args)
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temp HOME with RECALLD_HOME set and a recording `systemctl` first on PATH."""
    home = tmp_path / "user"
    home.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    systemctl = bin_dir / "systemctl"
    systemctl.write_text(
        "#!/bin/sh\n"
        'echo "$@" >> "$FAKE_SYSTEMCTL_LOG"\n'
        'if [ -n "$FAKE_SYSTEMCTL_FAIL" ]; then echo "$FAKE_SYSTEMCTL_FAIL" >&2; exit 1; fi\n'
    )
    systemctl.chmod(0o755)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SYSTEMCTL_LOG", str(tmp_path / "systemctl.log"))
    monkeypatch.setenv("RECALLD_HOME", str(tmp_path / "my store"))
    monkeypatch.setenv("RECALLD_EMBED__MODEL", "hash:64")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return home


def test_install_carries_the_environment_and_uninstall_removes_it(
    user: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["service", "install", "--platform", "linux"], capsys)
    assert code == 0, err
    unit = user / ".config/systemd/user/recalld.service"
    text = unit.read_text()
    assert f'Environment="RECALLD_HOME={tmp_path / "my store"}"' in text
    assert 'Environment="RECALLD_EMBED__MODEL=hash:64"' in text
    assert f'Environment="XDG_DATA_HOME={tmp_path / "data"}"' in text
    assert stat.S_IMODE(unit.stat().st_mode) == 0o600
    assert "RECALLD_HOME" in out
    log = (tmp_path / "systemctl.log").read_text().splitlines()
    assert log == ["--user daemon-reload", "--user enable --now recalld.service"]
    # What `enable` makes beside the file.
    wants = user / ".config/systemd/user/default.target.wants"
    wants.mkdir()
    (wants / "recalld.service").symlink_to(unit)

    code, _, err = run(["service", "uninstall", "--platform", "linux"], capsys)
    assert code == 0, err
    assert not unit.exists() and not (wants / "recalld.service").is_symlink()
    assert (tmp_path / "systemctl.log").read_text().splitlines()[-2:] == [
        "--user disable --now recalld.service",
        "--user daemon-reload",
    ]


def test_a_missing_user_bus_is_explained_and_uninstall_still_cleans_up(
    user: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SYSTEMCTL_FAIL", NO_BUS)
    code, _, err = run(["service", "install", "--platform", "linux"], capsys)
    unit = user / ".config/systemd/user/recalld.service"
    assert code == 1
    assert NO_BUS in err and "no systemd user session" in err and "enable-linger" in err
    assert str(unit) in err and "recalld service uninstall" in err
    assert unit.exists()
    wants = user / ".config/systemd/user/default.target.wants"
    wants.mkdir()
    (wants / "recalld.service").symlink_to(unit)

    code, out, err = run(["service", "uninstall", "--platform", "linux"], capsys)
    assert code == 1 and "could not stop the service" in err and NO_BUS in err
    assert not unit.exists() and not (wants / "recalld.service").is_symlink()
    assert "Removed" in out


def test_a_password_is_not_written_into_the_unit(
    user: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RECALLD_STORE__PATH", "postgresql://me:s3cret@db.example/recalld")
    code, _, err = run(["service", "install", "--platform", "linux"], capsys)
    assert code == 1 and "RECALLD_STORE__PATH holds a password" in err
    assert "s3cret" not in err
    assert not (user / ".config/systemd/user/recalld.service").exists()
    monkeypatch.setenv("RECALLD_STORE__PATH", "postgresql://me@db.example/recalld")
    assert carried_environment(os.environ)["RECALLD_STORE__PATH"].endswith("/recalld")


def test_the_plist_carries_the_environment(tmp_path: Path) -> None:
    env = carried_environment(
        {"RECALLD_HOME": "/srv/a <b>", "RECALLD_SEARCH__LIMIT": "5", "PATH": "/bin", "HOME": "/h"}
    )
    assert env == {"RECALLD_HOME": "/srv/a <b>", "RECALLD_SEARCH__LIMIT": "5"}
    rendered = render_service("macos", tmp_path, environment=env)
    parsed = plistlib.loads(rendered.text.encode())
    assert parsed["EnvironmentVariables"] == env
    assert parsed["ProgramArguments"][-1] == "serve"
    # Nothing to carry: an empty, still valid, dictionary.
    empty = plistlib.loads(render_service("macos", tmp_path).text.encode())
    assert empty["EnvironmentVariables"] == {}
    unit = render_service("linux", tmp_path, environment={"RECALLD_HOME": '/a "b" 100%'})
    assert 'Environment="RECALLD_HOME=/a \\"b\\" 100%%"' in unit.text
