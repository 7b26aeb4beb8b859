"""The `studio` command: start the studio, a worker, manage the database, users and tokens,
launch and follow runs, evaluate. Commands call the services directly, as the API does, and
act as a user of the studio: `--user NAME` (or STUDIO_USER), else the first admin (whoever
runs the CLI where the studio's database is can reach everything anyway; `--user` makes a
script act with a team member's role and ownership)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import typer

from studio import db, launcher, locate
from studio.settings import Settings, get_settings

app = typer.Typer(help="ICRL Studio: teach an LLM to use a tool with in-context RL.",
                  no_args_is_help=True, add_completion=False)
db_app = typer.Typer(help="Database migrations.", no_args_is_help=True)
token_app = typer.Typer(help="API tokens for scripts and CI.", no_args_is_help=True)
user_app = typer.Typer(help="Users and their roles (admins only).", no_args_is_help=True)
model_app = typer.Typer(help="Base models.", no_args_is_help=True)
run_app = typer.Typer(help="Training runs: launch, follow, cancel, resume.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(token_app, name="token")
app.add_typer(user_app, name="user")
app.add_typer(model_app, name="model")
app.add_typer(run_app, name="run")


_acting_as: dict[str, str | None] = {"user": None}


@app.callback()
def main(user: str = typer.Option(None, "--user", envvar="STUDIO_USER",
                                  help="Act as this user, with its role (default: the first "
                                  "admin).")) -> None:
    """ICRL Studio: teach an LLM to use a tool with in-context RL."""
    _acting_as["user"] = user


def _actor(settings: Settings):
    """Who the command acts as: --user NAME, else the first admin."""
    from studio.services.auth import actor_named, first_admin

    name = _acting_as["user"]
    return _call(actor_named, settings, name, prefix="--user: ") if name else \
        _call(first_admin, settings)


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


def _create_admin_once(settings: Settings) -> bool:
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
Host = typer.Option(None, "--host", help="Address to listen on (STUDIO_HOST).")
Port = typer.Option(None, "--port", help="Port to listen on (STUDIO_PORT).")


@app.command()
def up(host: str = Host, port: int = Port, data_dir: Path = DataDir,
       queues: str = typer.Option(None, help="Worker queues (STUDIO_WORKER_QUEUES).")) -> None:
    """Migrate, create the admin on a new database, and run the web app, a training worker
    and a worker for index builds and exports (each restarted when it dies)."""
    from studio.services.runs import reap_stale_runs
    from studio.services.uploads import remove_stale_staging

    settings = _settings(host=host, port=port, data_dir=data_dir, worker_queues=queues)
    _preflight(settings, migrate=True)
    created = _create_admin_once(settings)
    reap_stale_runs(settings)  # runs left `running` by a studio that was killed
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
    """Where this studio runs, for the CLI run from another folder (studio.locate)."""
    try:
        locate.write_record(settings, url)
    except OSError as exc:
        typer.echo(f"studio: warning: {locate.record_path()} could not be written "
                   f"({exc.strerror or exc}); commands run elsewhere need --data-dir "
                   f"{settings.resolved_data_dir}", err=True)


@app.command()
def web(host: str = Host, port: int = Port, data_dir: Path = DataDir) -> None:
    """Run the web app alone (production: migrate first with `studio db upgrade`)."""
    from studio.services.uploads import remove_stale_staging

    settings = _settings(host=host, port=port, data_dir=data_dir)
    _preflight(settings, migrate=False)
    remove_stale_staging(settings)  # uploads half received by a web app that was killed
    os.execv(sys.executable, launcher.web_command(settings))


@app.command()
def worker(queues: str = typer.Option("cpu", help="Comma-separated queues: cpu, gpu (training, "
                                      "evaluations), short (index builds, exports)."),
           concurrency: int = typer.Option(None, help="Jobs at once (one per GPU)."),
           data_dir: Path = DataDir) -> None:
    """Run one worker alone, for production nodes."""
    settings = _settings(data_dir=data_dir)
    names = [q.strip() for q in queues.split(",") if q.strip()]
    from studio.queue import QUEUES, SHORT_QUEUE

    unknown = sorted(set(names) - set(QUEUES))
    if unknown or not names:
        raise _fail(ValueError(f"--queues: unknown queue {unknown or queues!r}; "
                               f"use one or more of {', '.join(QUEUES)}"))
    if "gpu" in names:
        concurrency = _gpu_concurrency(concurrency)
    if names == [SHORT_QUEUE]:
        os.environ.update(launcher.SHORT_LANE_ENV)
    _preflight(settings, migrate=False)
    os.execv(sys.executable, launcher.worker_command(
        settings, names, concurrency or settings.worker_concurrency))


def _gpu_concurrency(asked: int | None) -> int:
    """One job per GPU: a GPU worker runs as many jobs at once as it sees GPUs."""
    from studio.gpus import visible_gpus

    gpus = visible_gpus()
    if not gpus:
        typer.echo("studio: warning: this gpu worker sees no GPU (CUDA_VISIBLE_DEVICES, "
                   "nvidia-smi); its jobs run on the CPU, one at a time", err=True)
        return asked or 1
    if asked and asked > len(gpus):
        raise _fail(ValueError(f"--concurrency: {asked} jobs at once, but this worker sees "
                               f"{len(gpus)} GPU(s) ({', '.join(gpus)}); one job per GPU"))
    return asked or len(gpus)


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
                 data_dir: Path = DataDir) -> None:
    """Print a new API token of the acting user (--user), with its role."""
    from studio.services.auth import issue_token

    settings = _studio_ready(data_dir)
    typer.echo(_call(issue_token, settings, _actor(settings), name)["token"])


# --- users ------------------------------------------------------------------------------------


def _print_new_user(new) -> None:
    typer.echo(f"user '{new.username}' ({new.role}); its password, shown once: {new.password}")


def _password(env: str | None) -> str | None:
    if env and not os.environ.get(env):
        raise _fail(ValueError(f"--password-env: {env} is not set"))
    return os.environ.get(env) if env else None


PasswordEnv = typer.Option(None, "--password-env", help="Environment variable holding the "
                           "password (default: one is made up and printed once).")


@user_app.command("add")
def user_add(name: str = typer.Argument(..., help="Username: letters, digits, . _ @ -"),
             role: str = typer.Option("member", help="admin, member or viewer."),
             password_env: str = PasswordEnv, data_dir: Path = DataDir) -> None:
    """Add a user: a viewer reads, a member also creates and changes its own, an admin all."""
    from studio.services.auth import add_user

    settings = _studio_ready(data_dir)
    _print_new_user(_call(add_user, settings, _actor(settings), name, role,
                          _password(password_env)))


@user_app.command("list")
def user_list(data_dir: Path = DataDir) -> None:
    """Every user with its role and whether it is disabled."""
    from studio.services.auth import list_users

    settings = _studio_ready(data_dir)
    _table(["ID", "USERNAME", "ROLE", "STATE", "CREATED (UTC)"],
           [[u["id"], u["username"], u["role"], "disabled" if u["disabled"] else "active",
             u["created_at"][:19].replace("T", " ")]
            for u in _call(list_users, settings, _actor(settings))])


@user_app.command("disable")
def user_disable(name: str = typer.Argument(...), data_dir: Path = DataDir) -> None:
    """Disable a user: its tokens and browser sessions stop at once; its data stays."""
    from studio.services.auth import set_disabled

    settings = _studio_ready(data_dir)
    _call(set_disabled, settings, _actor(settings), name, True)
    typer.echo(f"user '{name}' disabled")


@user_app.command("enable")
def user_enable(name: str = typer.Argument(...), data_dir: Path = DataDir) -> None:
    """Enable a disabled user again (it signs in again; its old tokens work again)."""
    from studio.services.auth import set_disabled

    settings = _studio_ready(data_dir)
    _call(set_disabled, settings, _actor(settings), name, False)
    typer.echo(f"user '{name}' enabled")


@user_app.command("set-role")
def user_set_role(name: str = typer.Argument(...),
                  role: str = typer.Argument(..., help="admin, member or viewer."),
                  data_dir: Path = DataDir) -> None:
    """Change a user's role (at once, for its tokens and sessions too)."""
    from studio.services.auth import set_role

    settings = _studio_ready(data_dir)
    found = _call(set_role, settings, _actor(settings), name, role)
    typer.echo(f"user '{name}' is now {found['role']}")


@user_app.command("reset-password")
def user_reset_password(name: str = typer.Argument(...), password_env: str = PasswordEnv,
                        data_dir: Path = DataDir) -> None:
    """Give a user a new password (its browser sessions end)."""
    from studio.services.auth import reset_password

    settings = _studio_ready(data_dir)
    _print_new_user(_call(reset_password, settings, _actor(settings), name,
                          _password(password_env)))


@app.command()
def demo(data_dir: Path = DataDir,
         math: bool = typer.Option(False, "--math", help="Load the math pack for the python "
                                   "tool instead: QA sets `math` and `math-heldout`, exemplar "
                                   "set `math`, no corpus."),
         calc: bool = typer.Option(False, "--calc", help="Load the arithmetic pack for the "
                                   "calculator tool instead: QA sets `calc` and `calc-heldout`, "
                                   "exemplar set `calc`, no corpus.")) -> None:
    """Load the demo pack: a corpus, a QA set and an exemplar set named `demo`, and the
    held-out questions as the QA set `demo-heldout` (with --math: the math pack; with --calc:
    the arithmetic pack)."""
    from studio.services.demo import load_calc_pack, load_demo_pack, load_math_pack
    from studio.services.errors import UserError

    if math and calc:
        raise _fail(ValueError("--math, --calc: one pack at a time"))
    settings = _studio_ready(data_dir)
    try:
        if math or calc:
            pack = (load_math_pack if math else load_calc_pack)(settings, _actor(settings))
        else:
            pack = load_demo_pack(settings, _actor(settings), index_now=True)
    except UserError as exc:
        raise _fail(exc) from None
    qa, exemplars, heldout = pack["qa_set"], pack["exemplar_set"], pack["heldout_qa_set"]
    if "corpus" in pack:
        corpus = pack["corpus"]
        typer.echo(f"corpus '{corpus['name']}': {corpus['num_documents']} documents, "
                   f"{corpus['num_passages']} passages, {corpus['status']}")
    typer.echo(f"QA set '{qa['name']}': {qa['num_rows']} questions to train on")
    typer.echo(f"QA set '{heldout['name']}': {heldout['num_rows']} held-out questions to "
               f"evaluate on (never in '{qa['name']}')")
    typer.echo(f"exemplar set '{exemplars['name']}': {exemplars['size']} exemplars, "
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


# --- runs and evaluations --------------------------------------------------------------------

RunId = typer.Argument(..., help="The run's id (`studio run list`).")
Wait = typer.Option(False, "--wait", help="Follow progress until the end; exit 1 unless it "
                    "succeeded.")
POLL_SECONDS = 1.0


def _studio_ready(data_dir: Path | None, *, queue: bool = False) -> Settings:
    """Settings of an existing, migrated studio (and its broker when a job is sent): the one
    named, else the one `studio up` runs, else ./studio-data; never a new one (studio.locate)."""
    _settings(data_dir=data_dir)
    settings = _settings(**locate.studio_overrides())
    try:
        locate.check_found(settings)
        launcher.check_data_dir(settings)
        launcher.check_database(settings)
        launcher.check_migrated(settings)
        if queue:
            launcher.check_queue(settings)
    except (locate.StudioNotFound, launcher.StartupError) as exc:
        raise _fail(exc) from None
    return settings


def _call(fn, *args, prefix: str = "", **kwargs):
    """A service call; a user error (bad field, unknown name, wrong state) is one line, exit 2."""
    from studio.services.errors import UserError

    try:
        return fn(*args, **kwargs)
    except UserError as exc:
        raise _fail(ValueError(f"{prefix}{exc}")) from None


def _read_config(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise _fail(ValueError(f"{path}: cannot read it ({exc.strerror or exc})")) from None


def _table(headers: list[str], rows: list[list[object]]) -> None:
    cells = [headers] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        typer.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _num(value: object, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


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
            f"({row['exemplars']} exemplars)  reward {_num(row.get('reward_mean'))}  "
            f"format {_num(row.get('format'), 2)}  em {_num(row.get('em'), 2)}  "
            f"tool calls {_num(row.get('search_calls'), 2)}  {_num(row.get('time_step'), 1)} s")


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
                      "(the demo pack, stored if missing; the default model).")


def _run_config(settings: Settings, config: Path | None, preset: str | None
                ) -> tuple[dict | str, str]:
    """The run config (a file's text, or a preset's dict) and the prefix of its errors."""
    from studio.services.presets import prepare_preset

    if (config is None) == (preset is None):
        raise _fail(ValueError("give a run YAML file or --preset NAME (one of them)"))
    if preset is not None:
        return _call(prepare_preset, settings, _actor(settings), preset), f"preset {preset}: "
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

    settings = _studio_ready(data_dir)
    text, prefix = _run_config(settings, config, preset)
    actor = _actor(settings)
    report = _call(validate_run, settings, actor, text, prefix=prefix)
    timing = report["time_estimate"]
    if timing["state"] == "measuring" and not timing["ahead"] and wait_estimate > 0:
        typer.echo(f"time: {timing['message']}; waiting up to {wait_estimate:.0f} s")
        deadline = time.monotonic() + wait_estimate
        while (get_calibration(settings, timing["calibration"])["state"] in ("queued", "running")
               and time.monotonic() < deadline):
            time.sleep(POLL_SECONDS)
        report = _call(validate_run, settings, actor, text, prefix=prefix)
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


@app.command()
def calibrate(model: str = typer.Option(None, help="Model: bundled name, HF id or folder "
                                        "(default: STUDIO_DEFAULT_MODEL)."),
              queue: str = typer.Option("cpu", help="Queue whose worker measures: cpu or gpu."),
              threads: int = typer.Option(1, help="CPU threads, as the runs' engine.threads."),
              dtype: str = typer.Option("auto", help="auto, float32 or bfloat16, as the runs' "
                                        "engine.dtype."),
              wait: bool = typer.Option(True, "--wait/--no-wait", help="Follow it to the end."),
              data_dir: Path = DataDir) -> None:
    """Measure how fast a model trains on a queue's worker (again), for the launch check's
    time estimate. A worker that runs one job at a time measures after the jobs ahead."""
    from studio.services.calibrations import get_calibration, request_calibration
    from studio.services.estimates import calibration_summary

    settings = _studio_ready(data_dir, queue=True)
    found = _call(request_calibration, settings, _actor(settings),
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

    settings = _studio_ready(data_dir, queue=True)
    if from_card is None:
        if model is not None:
            raise _fail(ValueError("--model goes with --from-card; a run YAML file names its "
                                   "model itself"))
        source, prefix = _run_config(settings, config, preset)
        run = _call(create_run, settings, _actor(settings), source, prefix=prefix)
    elif config is not None or preset is not None:
        raise _fail(ValueError("--from-card names the whole run: give it alone, without a run "
                               "YAML file or --preset"))
    else:
        run = _call(launch_from_bundle, settings, _actor(settings), _read_config(from_card),
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

    settings = _studio_ready(data_dir)
    rows = [[r["id"], r["name"], r["state"] + (f" #{r['queue_position']}"
                                               if r["queue_position"] else ""),
             f"{r['current_step']}/{r['total_steps']}", r["queue"], r["backend"],
             r["created_at"][:19].replace("T", " ")] for r in list_runs(settings)]
    _table(["ID", "NAME", "STATE", "STEP", "QUEUE", "BACKEND", "CREATED (UTC)"], rows)


@run_app.command("show")
def run_show(run_id: int = RunId,
             as_json: bool = typer.Option(False, "--json", help="The whole run as JSON."),
             data_dir: Path = DataDir) -> None:
    """One run: state, progress, worker, error, latest metrics (or all of it as JSON)."""
    from studio.services.runs import get_run, run_metrics

    settings = _studio_ready(data_dir)
    run = _call(get_run, settings, run_id)
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

    settings = _studio_ready(data_dir)
    typer.echo(_state_line(_call(cancel_run, settings, _actor(settings), run_id)))


@run_app.command("resume")
def run_resume(run_id: int = RunId, wait: bool = Wait, data_dir: Path = DataDir) -> None:
    """Queue an interrupted, paused, failed or cancelled run again, from its latest checkpoint."""
    from studio.services.runs import resume_run

    settings = _studio_ready(data_dir, queue=True)
    run = _call(resume_run, settings, _actor(settings), run_id)
    if wait:
        _exit_with(_follow(settings, run_id, since_step=run["current_step"]))
    else:
        typer.echo(_state_line(run))


@run_app.command("delete")
def run_delete(run_id: int = RunId, data_dir: Path = DataDir) -> None:
    """Delete a run that is not queued or running, with its metrics and checkpoints."""
    from studio.services.runs import delete_run

    settings = _studio_ready(data_dir)
    _call(delete_run, settings, _actor(settings), run_id)
    typer.echo(f"run {run_id} deleted")


def _protocol(pairs: list[str]) -> dict:
    import yaml

    protocol = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise _fail(ValueError(f"--protocol: '{pair}' is not KEY=VALUE, e.g. temperature=0.1"))
        protocol[key.strip()] = yaml.safe_load(value)
    return protocol


EVAL_COLUMNS = [("EM", "em"), ("SubEM", "subem"), ("F1", "f1"), ("answer rate", "answer_rate"),
                ("valid search", "valid_search_rate"), ("tool calls", "search_calls")]


@app.command("doctor")
def doctor(corpus: str = typer.Option(..., "--corpus", help="The corpus's name."),
           qa: str = typer.Option(None, "--qa", help="A QA set's name: answer reachability."),
           exemplars: str = typer.Option(None, "--exemplars",
                                         help="An exemplar set's name: exemplar replay."),
           k: int = typer.Option(3, "--k", help="Passages per search, as the run's grpo.top_k."),
           limit: int = typer.Option(5000, "--limit", help="Questions checked at most (a "
                                     "larger set is sampled evenly)."),
           data_dir: Path = DataDir) -> None:
    """The data doctor: how many questions find their answer by searching the question
    itself, and whether the exemplars show passages this corpus returns (docs/data-doctor.md)."""
    from studio.services import corpora, data_doctor, exemplar_sets, qa_sets

    if qa is None and exemplars is None:
        raise _fail(ValueError("give --qa NAME, --exemplars NAME or both"))
    settings = _studio_ready(data_dir)
    corpus_id = _call(corpora.find_corpus, settings, corpus, prefix="--corpus: ")["id"]
    if qa is not None:
        qa_id = _call(qa_sets.find_qa_set, settings, qa, prefix="--qa: ")["id"]
        report = _call(data_doctor.reachability, settings, corpus_id, qa_id, k=k, limit=limit,
                       on_progress=lambda done, total: typer.echo(
                           f"searched {done} of {total} questions", err=True))
        for line in data_doctor.reachability_lines(report):
            typer.echo(line)
        for worst in report["worst"]:
            typer.echo(f"  unreachable: {worst['question']} (answers: "
                       f"{' | '.join(worst['golden_answers'])}; retrieved: "
                       f"{', '.join(worst['retrieved']) or 'nothing'})")
    if exemplars is not None:
        set_id = _call(exemplar_sets.find_exemplar_set, settings, exemplars,
                       prefix="--exemplars: ")["id"]
        for line in data_doctor.replay_lines(
                _call(data_doctor.exemplar_replay, settings, corpus_id, set_id, k=k)):
            typer.echo(line)


@app.command("eval")
def evaluate(qa_set: list[str] = typer.Option(..., "--qa-set", help="QA set to evaluate on "
                                              "(repeat for several)."),
             run: int = typer.Option(None, "--run", help="A run: its latest checkpoint."),
             model: str = typer.Option(None, "--model", help="Or a model: bundled name, HF id, "
                                       "folder."),
             corpus: str = typer.Option(None, help="Corpus to search (default: the run's)."),
             limit: int = typer.Option(None, help="Only the first N questions of each set."),
             queue: str = typer.Option("cpu", help="Queue: cpu or gpu."),
             protocol: list[str] = typer.Option(None, "--protocol", help="KEY=VALUE override "
                                                "of the zero-shot protocol, e.g. max_turns=2."),
             wait: bool = Wait, data_dir: Path = DataDir) -> None:
    """Zero-shot evaluation (k = 0) of a run's checkpoint or a model; a table per QA set."""
    from studio.services import evaluations, qa_sets

    settings = _studio_ready(data_dir, queue=True)
    for name in qa_set:
        _call(qa_sets.find_qa_set, settings, name, prefix="--qa-set: ")
    overrides, actor = _protocol(protocol or []), _actor(settings)
    created = [_call(evaluations.create_evaluation, settings, actor, qa_set=name, corpus=corpus,
                     model=model, run_id=run, limit=limit, protocol=overrides, queue=queue)
               for name in qa_set]
    for evaluation, name in zip(created, qa_set, strict=True):
        typer.echo(f"evaluation {evaluation['id']} of {evaluation['model']} on '{name}': "
                   f"{evaluation['state']}"
                   + (f", {evaluation['waiting']}" if evaluation["waiting"] else ""))
    if not wait:
        return
    final = _wait_for_evaluations(settings, [e["id"] for e in created])
    rows, failed = [], False
    for evaluation, name in zip(final, qa_set, strict=True):
        if evaluation["state"] != "succeeded":
            failed = True
            typer.echo(f"evaluation {evaluation['id']} on '{name}' {evaluation['state']}: "
                       f"{evaluation['error']}")
            continue
        metrics = evaluation["metrics"]
        rows.append([name, metrics["questions"]] + [_num(metrics[key]) for _, key in
                                                    EVAL_COLUMNS])
    if rows:
        _table(["QA SET", "QUESTIONS"] + [title.upper() for title, _ in EVAL_COLUMNS], rows)
    if failed:
        raise typer.Exit(1)


def _wait_for_evaluations(settings: Settings, ids: list[int]) -> list[dict]:
    from studio.services.evaluations import get_evaluation

    progress: dict[int, object] = {}
    while True:
        current = [get_evaluation(settings, i) for i in ids]
        for evaluation in current:
            done = (evaluation["state"], evaluation["params"].get("done"))
            if progress.get(evaluation["id"]) != done:
                progress[evaluation["id"]] = done
                typer.echo(f"evaluation {evaluation['id']}: {done[0]}, "
                           f"{done[1]}/{evaluation['params'].get('total')} questions")
        if all(e["state"] in ("succeeded", "failed", "cancelled") for e in current):
            return current
        time.sleep(POLL_SECONDS)


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
    (the worker of queue short does the work)."""
    from studio.services import exports

    settings = _studio_ready(data_dir, queue=True)
    token = None
    if to == "hub":
        token = os.environ.get(token_env) or (
            typer.prompt("Hub access token", hide_input=True) if sys.stdin.isatty() else None)
        if not token:
            raise _fail(ValueError(f"--token-env: set {token_env} to a Hub access token with "
                                   "write access (it is never stored)"))
    found = _call(exports.create_export, settings, _actor(settings), run_id, target=to,
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


if __name__ == "__main__":
    app()
