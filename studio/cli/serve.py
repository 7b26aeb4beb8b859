"""Running the studio: `studio up` (everything, supervised), `studio web` and `studio worker`
(one process each, for production nodes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import typer

from studio.cli.common import DataDir, create_admin_once, fail, settings_with
from studio.jobs import launcher, locate
from studio.settings import Settings, comma_separated

Host = typer.Option(None, "--host", help="Address to listen on (STUDIO_HOST).")
Port = typer.Option(None, "--port", help="Port to listen on (STUDIO_PORT).")


def _preflight(settings: Settings, *, migrate: bool) -> None:
    try:
        launcher.preflight(settings, migrate=migrate)
    except launcher.StartupError as exc:
        raise fail(exc) from None


def up(host: str = Host, port: int = Port, data_dir: Path = DataDir,
       queues: str = typer.Option(None, help="Worker queues (STUDIO_WORKER_QUEUES).")) -> None:
    """Migrate, create the admin on a new database, and run the web app, a training worker
    and a worker for index builds and exports (each restarted when it dies)."""
    from studio.services.lost_jobs import reap_lost_jobs
    from studio.services.uploads import remove_stale_staging

    launcher.quiet_progress_bars()  # before any child is started: they inherit it
    settings = settings_with(host=host, port=port, data_dir=data_dir, worker_queues=queues)
    _preflight(settings, migrate=True)
    created = create_admin_once(settings)
    reap_lost_jobs(settings)  # jobs left `running` by a studio that was killed
    remove_stale_staging(settings)  # uploads half received by a web app that was killed
    workers = [launcher.RestartingWorker(settings, spec)
               for spec in launcher.studio_workers(settings)]
    web_app = subprocess.Popen(launcher.web_command(settings))
    base = f"http://{settings.host}:{settings.port}"
    if launcher.wait_until_serving(f"{base}/healthz", web_app):
        _record(settings, f"{base}/")
        typer.echo(f"ICRL Studio is serving {base}/ (API {base}/api/v1, docs "
                   f"{base}/api/v1/docs); data in {settings.resolved_data_dir}. Ctrl-C stops it.")
        if not created:
            typer.echo("Sign in with your user's password; a forgotten one: `studio user "
                       "reset-password NAME`.")
    raise typer.Exit(launcher.supervise(web_app, workers))


def _record(settings: Settings, url: str) -> None:
    """Where this studio runs, for the CLI run from another folder (studio.jobs.locate)."""
    try:
        locate.write_record(settings, url)
    except OSError as exc:
        typer.echo(f"studio: warning: {locate.record_path()} could not be written "
                   f"({exc.strerror or exc}); commands run elsewhere need --data-dir "
                   f"{settings.resolved_data_dir}", err=True)


def web(host: str = Host, port: int = Port, data_dir: Path = DataDir) -> None:
    """Run the web app alone (production: migrate first with `studio db upgrade`)."""
    from studio.services.uploads import remove_stale_staging

    settings = settings_with(host=host, port=port, data_dir=data_dir)
    _preflight(settings, migrate=False)
    remove_stale_staging(settings)  # uploads half received by a web app that was killed
    launcher.quiet_progress_bars()
    os.execv(sys.executable, launcher.web_command(settings))


def worker(queues: str = typer.Option("cpu", help="Comma-separated queues: cpu, gpu (training, "
                                      "evaluations), short (index builds, exports)."),
           concurrency: int = typer.Option(None, help="Jobs at once (one per GPU)."),
           data_dir: Path = DataDir) -> None:
    """Run one worker alone, for production nodes."""
    settings = settings_with(data_dir=data_dir)
    names = comma_separated(queues)
    from studio.jobs.queue import QUEUES, SHORT_QUEUE

    unknown = sorted(set(names) - set(QUEUES))
    if unknown or not names:
        raise fail(ValueError(f"--queues: unknown queue {unknown or queues!r}; "
                              f"use one or more of {', '.join(QUEUES)}"))
    if "gpu" in names:
        concurrency = _gpu_concurrency(concurrency)
    if names == [SHORT_QUEUE]:
        os.environ.update(launcher.SHORT_LANE_ENV)
    _preflight(settings, migrate=False)
    launcher.quiet_progress_bars()
    os.execv(sys.executable, launcher.worker_command(
        settings, names, concurrency or settings.worker_concurrency))


def _gpu_concurrency(asked: int | None) -> int:
    """One job per GPU: a GPU worker runs as many jobs at once as it sees GPUs."""
    from studio.jobs.gpus import visible_gpus

    gpus = visible_gpus()
    if not gpus:
        typer.echo("studio: warning: this gpu worker sees no GPU (CUDA_VISIBLE_DEVICES, "
                   "nvidia-smi); its jobs run on the CPU, one at a time", err=True)
        return asked or 1
    if asked and asked > len(gpus):
        raise fail(ValueError(f"--concurrency: {asked} jobs at once, but this worker sees "
                              f"{len(gpus)} GPU(s) ({', '.join(gpus)}); one job per GPU"))
    return asked or len(gpus)
