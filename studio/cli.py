"""The `studio` command: start the studio, a worker, manage the database and tokens."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import typer

from studio import db, launcher
from studio.settings import Settings, get_settings

app = typer.Typer(help="ICRL Studio: teach an LLM to use a tool with in-context RL.",
                  no_args_is_help=True, add_completion=False)
db_app = typer.Typer(help="Database migrations.", no_args_is_help=True)
token_app = typer.Typer(help="API tokens for scripts and CI.", no_args_is_help=True)
model_app = typer.Typer(help="Base models.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(token_app, name="token")
app.add_typer(model_app, name="model")


def _settings(**overrides: object) -> Settings:
    """Apply command-line overrides as STUDIO_* variables, so child processes see them too."""
    for key, value in overrides.items():
        if value is not None:
            os.environ[f"STUDIO_{key.upper()}"] = str(value)
    get_settings.cache_clear()
    return get_settings()


def _fail(exc: Exception) -> typer.Exit:
    typer.echo(f"studio: error: {exc}", err=True)
    return typer.Exit(2)


def _preflight(settings: Settings, *, migrate: bool) -> None:
    try:
        launcher.preflight(settings, migrate=migrate)
    except launcher.StartupError as exc:
        raise _fail(exc) from None


def _create_admin_once(settings: Settings) -> None:
    """On a database with no user yet, create the admin and print its one-time credentials."""
    from studio.services.auth import bootstrap_admin

    with db.session_scope(settings.sqlalchemy_url) as session:
        creds = bootstrap_admin(session)
    if creds:
        typer.echo("Created the admin user; these are shown once, keep them:")
        typer.echo(f"  username:  {creds.username}")
        typer.echo(f"  password:  {creds.password}")
        typer.echo(f"  API token: {creds.token}")


DataDir = typer.Option(None, "--data-dir", help="Data directory (STUDIO_DATA_DIR).")
Host = typer.Option(None, "--host", help="Address to listen on (STUDIO_HOST).")
Port = typer.Option(None, "--port", help="Port to listen on (STUDIO_PORT).")


@app.command()
def up(host: str = Host, port: int = Port, data_dir: Path = DataDir,
       queues: str = typer.Option(None, help="Worker queues (STUDIO_WORKER_QUEUES).")) -> None:
    """Migrate, create the admin on a new database, and run the web app and one worker."""
    settings = _settings(host=host, port=port, data_dir=data_dir, worker_queues=queues)
    _preflight(settings, migrate=True)
    _create_admin_once(settings)
    children = {
        "worker": subprocess.Popen(launcher.worker_command(
            settings, settings.queues, settings.worker_concurrency)),
        "web app": subprocess.Popen(launcher.web_command(settings)),
    }
    base = f"http://{settings.host}:{settings.port}"
    if launcher.wait_until_serving(f"{base}/healthz", children["web app"]):
        typer.echo(f"ICRL Studio is serving {base}/ (API {base}/api/v1, docs "
                   f"{base}/api/v1/docs); data in {settings.resolved_data_dir}. Ctrl-C stops it.")
    raise typer.Exit(launcher.supervise(children))


@app.command()
def web(host: str = Host, port: int = Port, data_dir: Path = DataDir) -> None:
    """Run the web app alone (production: migrate first with `studio db upgrade`)."""
    settings = _settings(host=host, port=port, data_dir=data_dir)
    _preflight(settings, migrate=False)
    os.execv(sys.executable, launcher.web_command(settings))


@app.command()
def worker(queues: str = typer.Option("cpu", help="Comma-separated queues: cpu, gpu."),
           concurrency: int = typer.Option(None, help="Jobs at once (one per GPU)."),
           data_dir: Path = DataDir) -> None:
    """Run one worker alone, for production nodes."""
    settings = _settings(data_dir=data_dir)
    names = [q.strip() for q in queues.split(",") if q.strip()]
    from studio.queue import QUEUES

    unknown = sorted(set(names) - set(QUEUES))
    if unknown or not names:
        raise _fail(ValueError(f"--queues: unknown queue {unknown or queues!r}; "
                               f"use one or more of {', '.join(QUEUES)}"))
    _preflight(settings, migrate=False)
    os.execv(sys.executable, launcher.worker_command(
        settings, names, concurrency or settings.worker_concurrency))


@db_app.command("upgrade")
def db_upgrade(revision: str = typer.Argument("head"), data_dir: Path = DataDir) -> None:
    """Apply migrations up to REVISION (default: newest); a new database gets its admin."""
    settings = _settings(data_dir=data_dir)
    try:
        launcher.check_data_dir(settings)
        launcher.check_database(settings)
    except launcher.StartupError as exc:
        raise _fail(exc) from None
    db.upgrade(settings.sqlalchemy_url, revision)
    typer.echo(f"database at revision {db.current_revision(settings.sqlalchemy_url)}")
    if revision == "head":
        _create_admin_once(settings)


@db_app.command("downgrade")
def db_downgrade(revision: str = typer.Argument(..., help="Target, e.g. base or -1."),
                 data_dir: Path = DataDir) -> None:
    """Revert migrations down to REVISION."""
    settings = _settings(data_dir=data_dir)
    db.downgrade(settings.sqlalchemy_url, revision)
    typer.echo(f"database at revision {db.current_revision(settings.sqlalchemy_url)}")


@token_app.command("create")
def token_create(name: str = typer.Option(..., help="What the token is for."),
                 user: str = typer.Option("admin", help="Owner of the token."),
                 data_dir: Path = DataDir) -> None:
    """Print a new API token for USER from the local database."""
    from studio.services.auth import AuthError, create_token, find_user

    settings = _settings(data_dir=data_dir)
    try:
        launcher.check_database(settings)
        launcher.check_migrated(settings)
        with db.session_scope(settings.sqlalchemy_url) as session:
            token = create_token(session, find_user(session, user), name)
    except (launcher.StartupError, AuthError) as exc:
        raise _fail(exc) from None
    typer.echo(token)


@app.command()
def demo(data_dir: Path = DataDir) -> None:
    """Load the demo pack: a corpus, a QA set and an exemplar set, each named `demo`."""
    from studio.services.demo import load_demo_pack
    from studio.services.errors import UserError

    settings = _settings(data_dir=data_dir)
    try:
        launcher.check_data_dir(settings)
        launcher.check_database(settings)
        launcher.check_migrated(settings)
        pack = load_demo_pack(settings, index_now=True)
    except (launcher.StartupError, UserError) as exc:
        raise _fail(exc) from None
    corpus, qa, exemplars = pack["corpus"], pack["qa_set"], pack["exemplar_set"]
    typer.echo(f"corpus 'demo': {corpus['num_documents']} documents, "
               f"{corpus['num_passages']} passages, {corpus['status']}")
    typer.echo(f"QA set 'demo': {qa['num_rows']} questions")
    typer.echo(f"exemplar set 'demo': {exemplars['size']} exemplars, "
               f"{exemplars['errors']} errors, {exemplars['warnings']} warnings")


@model_app.command("prepare")
def model_prepare(ref: str = typer.Argument(None, help="Model: bundled name, HF id or folder."),
                  data_dir: Path = DataDir) -> None:
    """Resolve a model to a local folder (converts the bundled SmolLM2 once)."""
    from studio.base_models import ModelNotAvailable, resolve_model

    settings = _settings(data_dir=data_dir)
    try:
        folder = resolve_model(ref or settings.default_model, launcher.check_data_dir(settings),
                               on_progress=typer.echo)
    except (launcher.StartupError, ModelNotAvailable) as exc:
        raise _fail(exc) from None
    typer.echo(str(folder))


@app.command("export")
def export(run_id: int = typer.Argument(..., help="The run whose checkpoint to export."),
           to: str = typer.Option("folder", "--to", help="folder | zip | hub"),
           step: int = typer.Option(None, help="Checkpoint after this many steps (default: "
                                               "the latest)."),
           repo_id: str = typer.Option(None, "--repo-id", help="Hub repo: namespace/name."),
           private: bool = typer.Option(True, "--private/--public", help="A new Hub repo's "
                                                                          "visibility."),
           token_env: str = typer.Option("HF_TOKEN", "--token-env", help="Environment variable "
                                         "holding the Hub token (asked for when it is unset)."),
           wait: bool = typer.Option(True, "--wait/--no-wait", help="Follow it to the end."),
           data_dir: Path = DataDir) -> None:
    """Export a run's checkpoint as a Hugging Face folder, a zip, or a push to the Hub
    (a worker serving the cpu queue does the work)."""
    import time

    from studio.services import exports
    from studio.services.errors import UserError

    settings = _settings(data_dir=data_dir)
    token = None
    if to == "hub":
        token = os.environ.get(token_env) or (
            typer.prompt("Hub access token", hide_input=True) if sys.stdin.isatty() else None)
        if not token:
            raise _fail(ValueError(f"--token-env: set {token_env} to a Hub access token with "
                                   "write access (it is never stored)"))
    try:
        launcher.check_database(settings)
        launcher.check_migrated(settings)
        found = exports.create_export(settings, run_id, target=to, step=step, repo_id=repo_id,
                                      private=private, token=token)
    except (launcher.StartupError, UserError) as exc:
        raise _fail(exc) from None
    typer.echo(f"export {found['id']}: {to} of run {run_id} after {found['step']} steps")
    shown = None
    while wait and found["state"] in ("queued", "running"):
        if found["message"] != shown:
            shown = found["message"]
            typer.echo(f"  {found['progress']:4.0%}  {shown}")
        time.sleep(0.5)
        found = exports.get_export(settings, found["id"])
    if found["state"] == "failed":
        typer.echo(f"export {found['id']} failed: {found['error']}\n"
                   f"retry it: POST /api/v1/exports/{found['id']}/retry", err=True)
        raise typer.Exit(1)
    typer.echo(f"export {found['id']}: {found['state']} {found['location'] or ''}".rstrip())


if __name__ == "__main__":
    app()
