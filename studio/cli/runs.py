"""`studio run`: training runs: validate, launch, follow, list, show, cancel, resume, delete."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from studio.cli.common import (
    POLL_SECONDS,
    DataDir,
    Wait,
    acting_user,
    call,
    fail,
    num,
    print_table,
    studio_ready,
)
from studio.settings import Settings

run_app = typer.Typer(help="Training runs: launch, follow, cancel, resume.", no_args_is_help=True)
RunId = typer.Argument(..., help="The run's id (`studio run list`).")


def _read_config(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise fail(ValueError(f"{path}: cannot read it ({exc.strerror or exc})")) from None



def _state_line(run: dict) -> str:
    line = f"run {run['id']} '{run['name']}': {run['state']}"
    if run["state"] == "queued":
        line += f" on the {run['queue']} queue, position {run['queue_position']}"
    elif run["state"] == "running":
        line += f" on {run['worker']} (attempt {run['attempt']})"
    elif run["error"]:
        line += f": {run['error']}"
    return line


def _step_line(run: dict, row: dict) -> str:
    return (f"step {row['step'] + 1}/{run['total_steps']}  stage {row['stage'] + 1} "
            f"({row['exemplars']} exemplars)  reward {num(row.get('reward_mean'))}  "
            f"format {num(row.get('format'), 2)}  em {num(row.get('em'), 2)}  "
            f"tool calls {num(row.get('search_calls'), 2)}  {num(row.get('time_step'), 1)} s")


def _follow(settings: Settings, run_id: int, since_step: int = 0) -> dict:
    """Print state changes, one line per new step and the run's new events (stage changes,
    warnings) until the run stops; return it."""
    from studio.services.run_progress import RunFollower

    follower, shown_state, first = RunFollower(settings, run_id), None, True
    while True:
        progress = follower.poll()
        run = progress.run
        for row in progress.metrics:  # all of them once it stopped
            if row["step"] >= since_step:
                typer.echo(_step_line(run, row))
        for event in [] if first else progress.events:  # the earlier ones are history
            typer.echo(f"step {event['step'] + 1}: {event['kind']}: {event['message']}")
        first = False
        if run["state"] != shown_state:
            typer.echo(_state_line(run))
            shown_state = run["state"]
        if progress.final:
            return run
        time.sleep(POLL_SECONDS)


def _exit_with(run: dict) -> None:
    if run["state"] != "succeeded":
        raise typer.Exit(1)


ConfigFile = typer.Argument(None, help="A run YAML file (or --preset).")
Preset = typer.Option(None, "--preset", help="A ready-made run instead of a file: quick-start "
                      "(search on the demo pack), search-tour (search on its short-span "
                      "questions), calculator (arithmetic with the calculator, guided) or "
                      "math (word problems with the python tool, guided); the "
                      "pack it trains on is stored if missing; the default model. "
                      "GET /api/v1/run-presets says what each did when measured.")


def _run_config(settings: Settings, config: Path | None, preset: str | None
                ) -> tuple[dict | str, str]:
    """The run config (a file's text, or a preset's dict) and the prefix of its errors."""
    from studio.services.presets import prepare_preset

    if (config is None) == (preset is None):
        raise fail(ValueError("give a run YAML file or --preset NAME (one of them)"))
    if preset is not None:
        return call(prepare_preset, settings, acting_user(settings), preset), f"preset {preset}: "
    return _read_config(config), f"{config}: "


@run_app.command("validate")
def run_validate(config: Path = ConfigFile, preset: str = Preset,
                 wait_estimate: float = typer.Option(
                     60, help="Seconds to wait for the measurement of the queue's device when "
                     "the time estimate needs one and nothing runs ahead of it (0: do not)."),
                 data_dir: Path = DataDir) -> None:
    """Check a run YAML file; estimate each stage's prompt length and time per step. Queues
    nothing but the measurement of the queue's device when there is none yet."""
    from studio.services.calibrations import get_calibration
    from studio.services.run_validation import validate_run

    settings = studio_ready(data_dir)
    text, prefix = _run_config(settings, config, preset)
    actor = acting_user(settings)
    report = call(validate_run, settings, actor, text, prefix=prefix)
    timing = report["time_estimate"]
    if timing["state"] == "measuring" and not timing["ahead"] and wait_estimate > 0:
        typer.echo(f"time: {timing['message']}; waiting up to {wait_estimate:.0f} s")
        deadline = time.monotonic() + wait_estimate
        while (get_calibration(settings, timing["calibration"])["state"] in ("queued", "running")
               and time.monotonic() < deadline):
            time.sleep(POLL_SECONDS)
        report = call(validate_run, settings, actor, text, prefix=prefix)
    _print_report(report)


def _print_report(report: dict) -> None:
    for stage in report["stages"]:
        seconds = stage["seconds_per_step"]
        typer.echo(f"stage {stage['stage']}: {stage['exemplars']} exemplars, {stage['steps']} "
                   f"steps, longest prompt {stage['prompt_tokens']} / "
                   f"{stage['max_prompt_tokens']} tokens"
                   + (f", at most about {seconds:,.1f} s per step" if seconds is not None else ""))
    typer.echo(f"time: {report['time_estimate']['message']}")
    for warning in report["warnings"]:
        typer.echo(f"warning: {warning}")



@run_app.command("launch")
def run_launch(config: Path = ConfigFile, preset: str = Preset,
               from_card: Path = typer.Option(
                   None, "--from-card", help="Start the same run as a model card (README.md) "
                   "or a run's reproduce.json describes, on the same data (checked by content "
                   "hash)."),
               model: str = typer.Option(None, "--model", help="With --from-card: the base "
                                         "model to train instead of the card's (a card names "
                                         "a local model folder by its name only)."),
               wait: bool = Wait, data_dir: Path = DataDir) -> None:
    """Validate a run YAML file (or a preset, or a model card's run), queue the run and print
    its id (and warnings)."""
    from studio.services.reproduce import launch_from_bundle
    from studio.services.runs import create_run

    settings = studio_ready(data_dir, queue=True)
    if from_card is None:
        if model is not None:
            raise fail(ValueError("--model goes with --from-card; a run YAML file names its "
                                  "model itself"))
        source, prefix = _run_config(settings, config, preset)
        run = call(create_run, settings, acting_user(settings), source, prefix=prefix)
    elif config is not None or preset is not None:
        raise fail(ValueError("--from-card names the whole run: give it alone, without a run "
                              "YAML file or --preset"))
    else:
        run = call(launch_from_bundle, settings, acting_user(settings), _read_config(from_card),
                   model=model, prefix=f"{from_card}: ")
    typer.echo(f"run {run['id']}")
    _print_report(run)
    if wait:
        _exit_with(_follow(settings, run["id"]))
    else:
        typer.echo(_state_line(run))


@run_app.command("list")
def run_list(data_dir: Path = DataDir) -> None:
    """Every run, newest first, with its state, progress and place in the queue."""
    from studio.services.runs import list_runs

    settings = studio_ready(data_dir)
    rows = [[r["id"], r["name"], r["state"] + (f" #{r['queue_position']}"
                                               if r["queue_position"] else ""),
             f"{r['current_step']}/{r['total_steps']}", r["queue"], r["backend"],
             r["created_at"][:19].replace("T", " ")] for r in list_runs(settings)]
    print_table(["ID", "NAME", "STATE", "STEP", "QUEUE", "BACKEND", "CREATED (UTC)"], rows)


@run_app.command("show")
def run_show(run_id: int = RunId,
             as_json: bool = typer.Option(False, "--json", help="The whole run as JSON."),
             data_dir: Path = DataDir) -> None:
    """One run: state, progress, worker, error, latest metrics (or all of it as JSON)."""
    from studio.services.runs import get_run, run_metrics

    settings = studio_ready(data_dir)
    run = call(get_run, settings, run_id)
    if as_json:
        typer.echo(json.dumps(run, indent=2))
        return
    typer.echo(_state_line(run))
    for key in ("backend", "queue", "attempt", "current_step", "total_steps", "worker",
                "checkpoint_dir", "created_at", "started_at", "finished_at"):
        typer.echo(f"  {key}: {run[key] if run[key] is not None else '-'}")
    latest = run_metrics(settings, run_id, max(run["current_step"] - 1, 0))
    if latest:
        typer.echo("  latest: " + _step_line(run, latest[-1]))


@run_app.command("cancel")
def run_cancel(run_id: int = RunId, data_dir: Path = DataDir) -> None:
    """Cancel a run: its process group is killed, its checkpoints and metrics stay."""
    from studio.services.runs import cancel_run

    settings = studio_ready(data_dir)
    typer.echo(_state_line(call(cancel_run, settings, acting_user(settings), run_id)))


@run_app.command("resume")
def run_resume(run_id: int = RunId, wait: bool = Wait, data_dir: Path = DataDir) -> None:
    """Queue an interrupted, paused, failed or cancelled run again, from its latest checkpoint."""
    from studio.services.runs import resume_run

    settings = studio_ready(data_dir, queue=True)
    run = call(resume_run, settings, acting_user(settings), run_id)
    if wait:
        _exit_with(_follow(settings, run_id, since_step=run["current_step"]))
    else:
        typer.echo(_state_line(run))


@run_app.command("delete")
def run_delete(run_id: int = RunId, data_dir: Path = DataDir) -> None:
    """Delete a run that is not queued or running, with its metrics and checkpoints."""
    from studio.services.runs import delete_run

    settings = studio_ready(data_dir)
    call(delete_run, settings, acting_user(settings), run_id)
    typer.echo(f"run {run_id} deleted")
