import os
import re
from pathlib import Path

import pytest

from recalld.config import (
    Settings,
    default_config_path,
    load_settings,
    settings_as_dict,
    socket_candidates,
)
from recalld.errors import ConfigError


def test_defaults_follow_recalld_home(tmp_path: Path):
    loaded = load_settings(None, {"RECALLD_HOME": str(tmp_path)})
    s = loaded.settings
    assert s.store_path == tmp_path / "data" / "recalld.db"
    assert s.socket_path == tmp_path / "run" / "recalld.sock"
    assert s.drop_folder == tmp_path / "data" / "drop"
    assert loaded.sources["embed.model"] == "default"


def test_xdg_dirs(tmp_path: Path):
    env = {"HOME": str(tmp_path), "XDG_RUNTIME_DIR": "/run/user/1000"}
    s = load_settings(None, env).settings
    assert s.store_path == tmp_path / ".local/share/recalld/recalld.db"
    assert default_config_path(env) == tmp_path / ".config/recalld/config.toml"


def test_the_socket_comes_from_the_home_alone(tmp_path: Path):
    """Not from XDG_RUNTIME_DIR or XDG_CACHE_HOME, which editors do not pass (issue 17)."""
    bare = {"HOME": str(tmp_path)}
    full = {**bare, "XDG_RUNTIME_DIR": "/run/user/1000", "XDG_CACHE_HOME": "/elsewhere"}
    expected = tmp_path / ".cache/recalld/run/recalld.sock"
    for env in (bare, full):
        assert load_settings(None, env).settings.socket_path == expected
    # A client looks there first, then where other environments and older versions put it.
    places = socket_candidates(load_settings(None, full), full)
    assert places == list(
        dict.fromkeys(
            [
                expected,
                Path("/run/user/1000/recalld/recalld.sock"),
                Path(f"/run/user/{os.getuid()}/recalld/recalld.sock"),
                Path("/elsewhere/recalld/run/recalld.sock"),
            ]
        )
    )
    # A socket set on purpose is the only place looked at.
    chosen = load_settings(None, bare, {"daemon.socket": "/tmp/x.sock"})
    assert socket_candidates(chosen, bare) == [Path("/tmp/x.sock")]


def test_precedence_file_env_flag(tmp_path: Path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[embed]\nmodel = "hash:32"\nbatch_size = 8\n[search]\nmmr = false\n')
    env = {
        "RECALLD_HOME": str(tmp_path),
        "RECALLD_EMBED__BATCH_SIZE": "16",
        "RECALLD_SEARCH__LIMIT": "7",
    }
    loaded = load_settings(cfg, env, {"search.limit": "3", "daemon.watch": "/a,/b"})
    s = loaded.settings
    assert s.embed.model == "hash:32" and loaded.sources["embed.model"] == str(cfg)
    assert s.embed.batch_size == 16 and loaded.sources["embed.batch_size"] == "env"
    assert s.search.limit == 3 and loaded.sources["search.limit"] == "flag"
    assert s.search.mmr is False
    assert s.daemon.watch == ("/a", "/b")
    flat = settings_as_dict(s)
    assert flat["daemon.watch"] == ["/a", "/b"] and flat["search.limit"] == 3


def test_default_file_is_used_when_present(tmp_path: Path):
    (tmp_path / "config.toml").write_text("[search]\nlimit = 4\n")
    assert load_settings(None, {"RECALLD_HOME": str(tmp_path)}).settings.search.limit == 4


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"search.nope": "1"}, "unknown setting"),
        (
            {"search.limit": "many"},
            r"'search.limit' must be a whole number, not 'many' \(from --set\)",
        ),
        ({"search.gate": "maybe"}, "must be true or false"),
    ],
)
def test_bad_values_are_config_errors(tmp_path: Path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_settings(None, {"RECALLD_HOME": str(tmp_path)}, overrides)


def test_unreadable_file(tmp_path: Path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[search\n")
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_settings(bad, {})


def test_the_example_config_lists_every_setting_with_its_default(tmp_path: Path):
    """config/config.toml, which the README says lists every setting, cannot miss one or
    drift from the defaults (issue 17): every key, set or commented out, is a setting; every
    setting is there; and what it sets is the built-in default."""
    example = Path(__file__).resolve().parents[2] / "config" / "config.toml"
    section, listed = "", set()
    for line in example.read_text().splitlines():
        if header := re.match(r"^\[([a-z_]+)\]", line):
            section = header.group(1) + "."
        elif key := re.match(r"^#?\s*([a-z_]+)\s*=", line):
            listed.add(section + key.group(1))
    every = set(settings_as_dict(Settings()))
    assert every - listed == set(), "missing from config/config.toml"
    assert listed - every == set(), "not a setting"
    loaded = load_settings(example, {"HOME": str(tmp_path)})
    defaults = settings_as_dict(load_settings(None, {"HOME": str(tmp_path)}).settings)
    assert settings_as_dict(loaded.settings) == defaults
