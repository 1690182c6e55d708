"""The `recalld` command line: the daemon (`recalld serve`) and a client for people and scripts.

Every command but `serve`, `config show`, `check --offline` and `service` talks to the daemon
over its socket. One wrapper, `main`, turns errors into messages and exit codes:
0 ok, 1 error, 2 usage, 3 daemon not running (or, for `serve`, could not start).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from recalld import __version__
from recalld.cli.admin import calibrate, check, config, errors, status
from recalld.cli.agent import agent, context
from recalld.cli.browse import list_, unforget
from recalld.cli.ingest import ingest, sources
from recalld.cli.jobs import EXIT_INTERRUPTED, jobs
from recalld.cli.mcp_command import mcp
from recalld.cli.memories import edit, history, link
from recalld.cli.migrate import migrate
from recalld.cli.models import models, reindex
from recalld.cli.search import forget, get, remember, search
from recalld.cli.service import serve, service
from recalld.cli.transfer import export, import_
from recalld.errors import DaemonNotRunning, RecalldError

EXIT_ERROR = 1
EXIT_UNAVAILABLE = 3


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="recalld")
def cli() -> None:
    """recalld: local-first long-term memory for AI assistants, editors and agents.

    Start the daemon with `recalld serve`; then search, remember and ingest from here.
    """


for command in (
    serve,
    search,
    remember,
    get,
    forget,
    unforget,
    list_,
    edit,
    history,
    link,
    ingest,
    jobs,
    sources,
    status,
    calibrate,
    errors,
    check,
    config,
    export,
    import_,
    mcp,
    service,
    models,
    reindex,
    migrate,
    agent,
    context,
):
    cli.add_command(command)


def main(argv: Sequence[str] | None = None) -> None:
    """The console entry point: run `cli` and map errors to messages and exit codes."""
    try:
        code = cli.main(
            args=list(argv) if argv is not None else None,
            prog_name="recalld",
            standalone_mode=False,
        )
    except click.exceptions.Abort as exc:
        click.echo("Aborted!", err=True)
        # click turns Ctrl-C into Abort; a declined prompt is an Abort of its own.
        sys.exit(EXIT_INTERRUPTED if isinstance(exc.__cause__, KeyboardInterrupt) else EXIT_ERROR)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except DaemonNotRunning as exc:
        click.echo(f"Error: {exc.message}", err=True)
        sys.exit(EXIT_UNAVAILABLE)
    except RecalldError as exc:
        click.echo(f"Error: {exc.message}", err=True)
        sys.exit(EXIT_ERROR)
    except BrokenPipeError:
        sys.exit(EXIT_ERROR)  # e.g. `recalld search x | head -1`
    sys.exit(code if isinstance(code, int) else 0)
