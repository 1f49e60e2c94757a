"""`lyasched` command group. Subcommands live in their own modules and load lazily,
so `lyasched replay` does not import torch and `lyasched profiles` does not import the simulator."""

from __future__ import annotations

import importlib
from typing import Any

import click

from lyasched.cli.errors import BadInput

# name -> "module:attribute" of a click command
SUBCOMMANDS: dict[str, str] = {
    "replay": "lyasched.cli.replay:replay",
    "profiles": "lyasched.cli.profiles:profiles",
    "calibrate": "lyasched.cli.calibrate:calibrate",
    "serve": "lyasched.cli.serve:serve",
    "whatif": "lyasched.cli.whatif:whatif",
    "failsafe": "lyasched.cli.failsafe:failsafe",
    "health": "lyasched.cli.health:health",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(SUBCOMMANDS))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in SUBCOMMANDS:
            mod, attr = SUBCOMMANDS[name].split(":")
            return getattr(importlib.import_module(mod), attr)
        return super().get_command(ctx, name)

    def invoke(self, ctx: click.Context) -> Any:
        # Bad input: one line (``Error: ...``, exit 2), not click's usage block (issue 5).
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            raise BadInput(e.format_message()) from None


@click.group(cls=LazyGroup)
@click.version_option(package_name="lyasched")
def main() -> None:
    """lyasched: Lyapunov scheduling of distributed training jobs on Slurm."""
