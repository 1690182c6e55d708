"""The docs kept true by tests (issue 13, item 5): every socket method is documented in
docs/protocol.md, and every CLI command and option appears in the docs or in its `--help`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click

from recalld.cli import cli
from recalld.daemon.methods import METHODS

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL = ROOT / "docs" / "protocol.md"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def protocol_section(title: str) -> str:
    text = PROTOCOL.read_text("utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def documented_methods() -> set[str]:
    """The methods named in the headings of the protocol's Methods section."""
    names: set[str] = set()
    for heading in re.findall(r"^### (.+)$", protocol_section("Methods"), re.MULTILINE):
        names.update(re.findall(r"`([a-z_/]+)`", heading))
    return names


def test_every_socket_method_is_documented() -> None:
    documented = documented_methods()
    assert sorted(set(METHODS) - documented) == [], "not in docs/protocol.md, Methods"
    assert sorted(documented - set(METHODS)) == [], "documented, but the daemon has no such method"


def commands(
    command: click.Command, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every command under `command` with its path (`("sources", "add")`), groups included."""
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, name
            yield from commands(sub, (*path, name))


def doc_lines() -> list[str]:
    return [line for doc in DOCS for line in doc.read_text("utf-8").splitlines()]


def lines_about(path: tuple[str, ...], lines: list[str]) -> list[str]:
    """The docs' lines that name the command `recalld PATH`: a sub-command is named beside its
    group's (`recalld sources list` / `add DIR` / `remove DIR`)."""
    top = re.compile(rf"\brecalld {re.escape(path[0])}\b")
    about = [line for line in lines if top.search(line)]
    for depth in range(1, len(path)):
        parent, name = re.escape(path[depth - 1]), re.escape(path[depth])
        sub = re.compile(rf"`(?:recalld )?(?:{parent} )?\[?{name}\b")
        about = [line for line in about if sub.search(line)]
    return about


def test_every_cli_command_is_documented() -> None:
    lines = doc_lines()
    missing = [" ".join(path) for path, _ in commands(cli) if path and not lines_about(path, lines)]
    assert missing == [], "not in README.md or docs/*.md"


# Options the docs give once for all commands (docs/protocol.md, Command line), and the
# commands that do not take them, which the docs name.
EVERY_COMMAND = {"--json": {"serve", "mcp", "context"}}
EVERY_SETTINGS_COMMAND = {
    "--config": {"agent", "context", "migrate", "service uninstall"},
    "--set": {"agent", "context", "migrate", "service uninstall"},
}


def without(option: str) -> set[str]:
    """The commands (a whole group by its name) that do not take `option`."""
    lacking = {
        " ".join(path)
        for path, command in commands(cli)
        if path
        and not isinstance(command, click.Group)
        and not any(option in p.opts for p in command.params if isinstance(p, click.Option))
    }
    for path, command in commands(cli):
        if path and isinstance(command, click.Group):
            name = " ".join(path)
            subs = {n for n in lacking if n.startswith(name + " ")}
            if subs and len(subs) == len(command.list_commands(click.Context(command))):
                lacking = (lacking - subs) | {name}
    return lacking


def test_the_options_every_command_takes_are_said_truly() -> None:
    paragraph = protocol_section("Command line").split("\n\n")[1]
    for option, exceptions in (EVERY_COMMAND | EVERY_SETTINGS_COMMAND).items():
        assert without(option) == exceptions, option
        for name in exceptions:
            assert f"`{name}`" in paragraph, (option, name)


def test_every_cli_option_is_documented_or_explained_in_its_help() -> None:
    lines = doc_lines()
    everywhere = set(EVERY_COMMAND) | set(EVERY_SETTINGS_COMMAND)
    missing: list[str] = []
    for path, command in commands(cli):
        about = "\n".join(lines_about(path, lines)) if path else ""
        ctx = click.Context(command)
        help_option = command.get_help_option(ctx)
        for param in command.params:
            if not isinstance(param, click.Option) or param is help_option or param.hidden:
                continue
            names = [n for n in (*param.opts, *param.secondary_opts) if n.startswith("--")]
            in_docs = any(re.search(rf"{re.escape(n)}\b", about) for n in names)
            if in_docs or set(names) & everywhere or (param.help or "").strip():
                continue
            missing.append(f"recalld {' '.join(path)} {'/'.join(param.opts)}")
    assert missing == [], "neither in the docs nor explained in --help"


def test_the_docs_name_no_option_a_command_lacks() -> None:
    """`recalld CMD ... --opt` in the docs: CMD (or one of its sub-commands) takes `--opt`."""
    options: dict[str, set[str]] = {}
    for path, command in commands(cli):
        if path:
            taken = options.setdefault(path[0], set())
            for param in command.params:
                if isinstance(param, click.Option):
                    taken.update((*param.opts, *param.secondary_opts))
    wrong = []
    for line in doc_lines():
        for match in re.finditer(r"recalld ([a-z][a-z-]*)((?: [^`|#]*)?)", line):
            name, rest = match.groups()
            if name not in options:
                continue
            for option in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", rest):
                if option not in options[name]:
                    wrong.append(f"recalld {name} {option}")
    assert wrong == []
