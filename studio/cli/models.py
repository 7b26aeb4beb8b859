"""`studio models` (the base models: prepare one, list the shelf) and `studio calibrate` (how
fast a model trains on a queue's worker, for the launch check's time estimate)."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from studio.cli.common import (
    POLL_SECONDS,
    DataDir,
    acting_user,
    call,
    fail,
    settings_with,
    studio_ready,
)
from studio.jobs import launcher

model_app = typer.Typer(help="Base models.", no_args_is_help=True)


@model_app.command("prepare")
def model_prepare(ref: str = typer.Argument(None, help="Model: bundled name, HF id or folder."),
                  data_dir: Path = DataDir) -> None:
    """Resolve a model to a local folder (converts the bundled SmolLM2 once)."""
    from studio.models.base_models import ModelNotAvailable, resolve_model

    settings = settings_with(data_dir=data_dir)
    try:
        folder = resolve_model(ref or settings.default_model, launcher.check_data_dir(settings),
                               on_progress=typer.echo)
    except (launcher.StartupError, ModelNotAvailable) as exc:
        raise fail(exc) from None
    typer.echo(str(folder))


@model_app.command("list")
def model_list(data_dir: Path = DataDir) -> None:
    """The model shelf: the base models this studio can train, where each comes from, and
    what is known of each (size, licence, chat template, eos, speed here, reading)."""
    from studio.services.model_shelf import model_shelf, shelf_words

    for row in model_shelf(studio_ready(data_dir)):
        words = shelf_words(row)
        install = f": {row['install']}" if row["install"] else ""
        typer.echo(f"{row['name']}{' (default)' if row['default'] else ''}: {row['title']}, "
                   f"{row['source']}, {row['state']}{install}")
        facts = (words[key] for key in ("size", "licence", "template", "eos", "check"))
        typer.echo(f"  {' · '.join(fact for fact in facts if fact)}")
        typer.echo(f"  speed here: {words['speed']}")
        typer.echo(f"  reads: {words['reads']}")
        for note in row["notes"]:
            typer.echo(f"  {note}")


def calibrate(model: str = typer.Option(None, help="Model: bundled name, HF id or folder "
                                        "(default: STUDIO_DEFAULT_MODEL)."),
              queue: str = typer.Option("cpu", help="Queue whose worker measures: cpu or gpu."),
              threads: int = typer.Option(1, help="CPU threads, as the runs' engine.threads."),
              dtype: str = typer.Option("auto", help="auto, float32, bfloat16 or "
                                        "bfloat16-autocast, as the runs' engine.dtype."),
              wait: bool = typer.Option(True, "--wait/--no-wait", help="Follow it to the end."),
              data_dir: Path = DataDir) -> None:
    """Measure how fast a model trains on a queue's worker (again), for the launch check's
    time estimate. A worker that runs one job at a time measures after the jobs ahead."""
    from studio.services.calibrations import get_calibration, request_calibration
    from studio.services.estimates import calibration_summary

    settings = studio_ready(data_dir, queue=True)
    found = call(request_calibration, settings, acting_user(settings),
                 model=model or settings.default_model, queue=queue, threads=threads,
                 dtype=dtype)
    typer.echo(f"calibration {found['id']}: {found['model']} on queue {queue} "
               f"({found['threads']} thread(s), {found['dtype']}): {found['state']}")
    shown = found["state"]
    while wait and found["state"] in ("queued", "running"):
        time.sleep(POLL_SECONDS)
        found = get_calibration(settings, found["id"])
        if found["state"] != shown:
            shown = found["state"]
            typer.echo(f"calibration {found['id']}: {shown}"
                       + (f" on {found['worker']}" if found["worker"] else ""))
    if found["state"] == "failed":
        typer.echo(f"calibration {found['id']} failed: {found['error']}", err=True)
        raise typer.Exit(1)
    if found["state"] == "succeeded":
        figures = found["figures"]
        typer.echo(f"measured on {found['worker']} ({found['device']['name']}) in "
                   f"{figures['measure_seconds']:.0f} s: {calibration_summary(figures)}")
