import dataclasses
import os
import re
import typing
from pathlib import Path

import pytest

from recalld.config import (
    Settings,
    default_config_path,
    load_settings,
    search_overrides,
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


def choice_settings() -> dict[str, tuple[str, ...]]:
    """Every setting that takes one of a fixed set of words, with its words."""
    found: dict[str, tuple[str, ...]] = {}
    hints = typing.get_type_hints(Settings)
    for section in dataclasses.fields(Settings):
        cls = hints[section.name]
        if not dataclasses.is_dataclass(cls):
            continue
        for name, annotation in typing.get_type_hints(cls).items():
            if typing.get_origin(annotation) is tuple:
                annotation = typing.get_args(annotation)[0]
            if typing.get_origin(annotation) is typing.Literal:
                found[f"{section.name}.{name}"] = typing.get_args(annotation)
    return found


def test_the_choice_settings_are_literals():
    assert set(choice_settings()) == {
        "store.vector_index",
        "embed.encoding_format",
        "search.mode",
        "search.fusion",
        "search.weighting",
        "search.time_mode",
        "links.granularities",
        "links.supersede",
        "privacy.symlinks",
    }


@pytest.mark.parametrize("source", ["file", "env", "flag"])
def test_a_bad_choice_names_the_setting_the_value_and_the_choices(tmp_path: Path, source: str):
    for key, choices in choice_settings().items():
        section, name = key.split(".")
        env = {"RECALLD_HOME": str(tmp_path)}
        overrides: dict[str, str] = {}
        path = None
        if source == "file":
            path = tmp_path / "config.toml"
            path.write_text(f'[{section}]\n{name} = "bogus"\n')
        elif source == "env":
            env[f"RECALLD_{section.upper()}__{name.upper()}"] = "bogus"
        else:
            overrides[key] = "bogus"
        with pytest.raises(ConfigError) as caught:
            load_settings(path, env, overrides)
        message = caught.value.message
        assert f"'{key}' must be one of {', '.join(choices)}, not 'bogus'" in message, message
        assert caught.value.data["setting"] == key
        assert caught.value.data["source"] == (str(path) if path else source)


def test_every_choice_is_accepted():
    for key, choices in choice_settings().items():
        for choice in choices:
            loaded = load_settings(None, {"HOME": "/nonexistent"}, {key: choice})
            value = settings_as_dict(loaded.settings)[key]
            assert value == ([choice] if key == "links.granularities" else choice)


def test_granularities_are_checked_one_by_one(tmp_path: Path):
    loaded = load_settings(
        None, {"RECALLD_HOME": str(tmp_path)}, {"links.granularities": "fact,round"}
    )
    assert loaded.settings.links.granularities == ("fact", "round")
    with pytest.raises(ConfigError, match=r"not 'sentence' \(from --set\)"):
        load_settings(
            None, {"RECALLD_HOME": str(tmp_path)}, {"links.granularities": "fact,sentence"}
        )


def test_request_settings_are_checked_against_the_choices():
    assert search_overrides({"mode": "bm25"}) == {"mode": "bm25"}
    with pytest.raises(ConfigError, match=r"'search\.mode' must be one of hybrid, vector, bm25"):
        search_overrides({"mode": "hybird"})


def test_the_choices_agree_with_the_code_that_uses_them():
    from recalld.ingest.admission import SYMLINK_POLICIES
    from recalld.ingest.supersede_llm import SUPERSEDE_MODES
    from recalld.retrieval.search import FUSIONS, MODES, TIME_MODES, WEIGHTINGS
    from recalld.storage.pg.schema import VECTOR_INDEXES
    from recalld.types import GRANULARITIES

    choices = choice_settings()
    assert choices["search.mode"] == MODES
    assert choices["search.fusion"] == FUSIONS
    assert choices["search.weighting"] == WEIGHTINGS
    assert choices["search.time_mode"] == TIME_MODES
    assert choices["store.vector_index"] == VECTOR_INDEXES
    assert choices["links.granularities"] == GRANULARITIES
    assert choices["links.supersede"] == SUPERSEDE_MODES
    assert choices["privacy.symlinks"] == SYMLINK_POLICIES
