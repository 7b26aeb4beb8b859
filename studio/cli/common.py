"""What every command group uses: the acting user (`--user`), the settings, the one-line
error exit, the service call that turns a user error into one, tables and shared options."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from studio.jobs import launcher, locate
from studio.settings import Settings, get_settings
from studio.storage import db

acting_as: dict[str, str | None] = {"user": None}


def acting_user(settings: Settings):
    """Who the command acts as: --user NAME, else the first admin."""
    from studio.services.auth import actor_named, first_admin

    name = acting_as["user"]
    return call(actor_named, settings, name, prefix="--user: ") if name else \
        call(first_admin, settings)


def settings_with(**overrides: object) -> Settings:
    """Apply command-line overrides as STUDIO_* variables, so child processes see them too."""
    for key, value in overrides.items():
        if value is not None:
            os.environ[f"STUDIO_{key.upper()}"] = str(value)
    get_settings.cache_clear()
    return get_settings()


def fail(exc: Exception) -> typer.Exit:
    typer.echo(f"studio: error: {exc}", err=True)
    return typer.Exit(2)


def create_admin_once(settings: Settings) -> bool:
    """On a database with no user yet, create the admin and print its one-time credentials;
    whether it did."""
    from studio.services.auth import bootstrap_admin

    with db.session_scope(settings.sqlalchemy_url) as session:
        creds = bootstrap_admin(session)
    if creds:
        typer.echo("Created the admin user; these are shown once, keep them:")
        typer.echo(f"  username:  {creds.username}")
        typer.echo(f"  password:  {creds.password}")
        typer.echo(f"  API token: {creds.token}")
    return creds is not None


DataDir = typer.Option(None, "--data-dir", help="Data directory (STUDIO_DATA_DIR).")
Wait = typer.Option(False, "--wait", help="Follow progress until the end; exit 1 unless it "
                    "succeeded.")
POLL_SECONDS = 1.0


def studio_ready(data_dir: Path | None, *, queue: bool = False) -> Settings:
    """Settings of an existing, migrated studio (and its broker when a job is sent): the one
    named, else the one `studio up` runs, else ./studio-data; never a new one
    (studio.jobs.locate)."""
    settings_with(data_dir=data_dir)
    settings = settings_with(**locate.studio_overrides())
    try:
        locate.check_found(settings)
        launcher.check_data_dir(settings)
        launcher.check_database(settings)
        launcher.check_migrated(settings)
        if queue:
            launcher.check_queue(settings)
    except (locate.StudioNotFound, launcher.StartupError) as exc:
        raise fail(exc) from None
    return settings


def call(fn, *args, prefix: str = "", **kwargs):
    """A service call; a user error (bad field, unknown name, wrong state) is one line, exit 2."""
    from studio.services.errors import UserError

    try:
        return fn(*args, **kwargs)
    except UserError as exc:
        raise fail(ValueError(f"{prefix}{exc}")) from None


def print_table(headers: list[str], rows: list[list[object]]) -> None:
    cells = [headers] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        typer.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def num(value: object, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
