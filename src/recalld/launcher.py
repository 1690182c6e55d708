"""The `recalld` console entry point: `recalld context` (an agent hook, run on every prompt)
goes straight to `recalld.hooks.context`, the plain forms of `recalld search` to
`recalld.cli.fast_search` (both without click); every other command loads the click CLI."""

from __future__ import annotations

import sys


def main() -> None:
    """Dispatch on the first argument."""
    args = sys.argv[1:]
    if args[:1] == ["context"] and not {"-h", "--help"} & set(args):
        from recalld.hooks.context import main as hook

        sys.exit(hook(args[1:]))
    if args[:1] == ["search"]:
        from recalld.cli.fast_search import run

        code = run(args[1:])
        if code is not None:
            sys.exit(code)
    from recalld.cli.app import main as cli

    cli()
