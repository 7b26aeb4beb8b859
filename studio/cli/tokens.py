"""`studio token`: API tokens for scripts and CI."""

from __future__ import annotations

from pathlib import Path

import typer

from studio.cli.common import DataDir, acting_user, call, studio_ready

token_app = typer.Typer(help="API tokens for scripts and CI.", no_args_is_help=True)


@token_app.command("create")
def token_create(name: str = typer.Option(..., help="What the token is for."),
                 data_dir: Path = DataDir) -> None:
    """Print a new API token of the acting user (--user), with its role."""
    from studio.services.auth import issue_token

    settings = studio_ready(data_dir)
    typer.echo(call(issue_token, settings, acting_user(settings), name)["token"])
