"""`studio db`: database migrations."""

from __future__ import annotations

from pathlib import Path

import typer

from studio.cli.common import DataDir, create_admin_once, fail, settings_with
from studio.jobs import launcher
from studio.storage import db

db_app = typer.Typer(help="Database migrations.", no_args_is_help=True)


@db_app.command("upgrade")
def db_upgrade(revision: str = typer.Argument("head"), data_dir: Path = DataDir) -> None:
    """Apply migrations up to REVISION (default: newest); a new database gets its admin."""
    settings = settings_with(data_dir=data_dir)
    try:
        launcher.check_data_dir(settings)
        launcher.check_database(settings)
    except launcher.StartupError as exc:
        raise fail(exc) from None
    db.upgrade(settings.sqlalchemy_url, revision)
    typer.echo(f"database at revision {db.current_revision(settings.sqlalchemy_url)}")
    if revision == "head":
        create_admin_once(settings)


@db_app.command("downgrade")
def db_downgrade(revision: str = typer.Argument(..., help="Target, e.g. base or -1."),
                 data_dir: Path = DataDir) -> None:
    """Revert migrations down to REVISION."""
    settings = settings_with(data_dir=data_dir)
    db.downgrade(settings.sqlalchemy_url, revision)
    typer.echo(f"database at revision {db.current_revision(settings.sqlalchemy_url)}")
