"""The `recalld` console entry point: `recalld context` (an agent hook, run on every prompt)
goes straight to `recalld.hooks.context`; every other command loads the click CLI."""

from __future__ import annotations

import sys


def main() -> None:
    """Dispatch on the first argument."""
    args = sys.argv[1:]
    if args[:1] == ["context"] and not {"-h", "--help"} & set(args):
        from recalld.hooks.context import main as hook

        sys.exit(hook(args[1:]))
    from recalld.cli import main as cli

    cli()
