"""`studio export` (export a run's checkpoint) and `studio exports` (the exports made: list,
delete)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import typer

from studio.cli.common import DataDir, acting_user, call, fail, print_table, studio_ready

exports_app = typer.Typer(help="Exports made (`studio export` makes one): list, delete.",
                          no_args_is_help=True)


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
    (the worker of queue short does the work)."""
    from studio.services import exports

    settings = studio_ready(data_dir, queue=True)
    token = None
    if to == "hub":
        token = os.environ.get(token_env) or (
            typer.prompt("Hub access token", hide_input=True) if sys.stdin.isatty() else None)
        if not token:
            raise fail(ValueError(f"--token-env: set {token_env} to a Hub access token with "
                                  "write access (it is never stored)"))
    found = call(exports.create_export, settings, acting_user(settings), run_id, target=to,
                 step=step, repo_id=repo_id, private=private, token=token)
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


@exports_app.command("list")
def exports_list(run_id: int = typer.Option(None, "--run", help="Only this run's exports."),
                 data_dir: Path = DataDir) -> None:
    """Every export, newest first, with the bytes it holds on disk (its owner's quota)."""
    from studio.jobs.lifecycle import RunState
    from studio.services.exports import list_exports

    settings = studio_ready(data_dir)
    print_table(["ID", "OWNER", "RUN", "TARGET", "STEP", "STATE", "ON DISK (BYTES)", "WHERE"],
                [[e["id"], e["owner"] or "-", e["run_id"], e["target"], e["step"],
                  RunState(e["state"]).value,
                  e["stored_bytes"], e["location"] or "-"] for e in list_exports(settings, run_id)])


@exports_app.command("delete")
def exports_delete(export_id: int = typer.Argument(..., help="The export to delete."),
                   data_dir: Path = DataDir) -> None:
    """Delete an export that is not queued or running, with its folder or zip (a Hub
    repository it pushed stays)."""
    from studio.services.exports import delete_export

    settings = studio_ready(data_dir)
    call(delete_export, settings, acting_user(settings), export_id)
    typer.echo(f"export {export_id} deleted")
