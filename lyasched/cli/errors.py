"""Bad input on the command line: ONE line on stderr and exit 2, never click's usage block (issue 5)."""

from __future__ import annotations

import sys
from typing import Any

import click

EXIT_USAGE, EXIT_INTERRUPTED = 2, 130


def one_line(message: str) -> str:
    """A message folded onto one line (click's usage messages may span several)."""
    return " ".join(str(message).split())


class BadInput(click.ClickException):
    """Bad input (an option, a file's content): ``Error: MESSAGE`` on one line, exit 2."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


class OneLineCommand(click.Command):
    """A stand-alone command (lyasub, lyastat) whose errors print as ``PROG: error: MESSAGE``: usage
    errors exit 2, other click errors with their own code; Ctrl-C prints ``PROG: interrupted`` (130).

    ``prog`` is given to ``@click.command(cls=OneLineCommand, prog="lyasub")``."""

    def __init__(self, *args: Any, prog: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prog = prog

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.Abort:
            click.echo(f"{self.prog}: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except click.ClickException as e:
            click.echo(f"{self.prog}: error: {one_line(e.format_message())}", err=True)
            sys.exit(e.exit_code)
        sys.exit(rv if isinstance(rv, int) else 0)
