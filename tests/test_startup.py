"""A broken setting gives one clear line at start-up, not a traceback."""

from __future__ import annotations

import json
import subprocess

import pytest

from studio.jobs import locate
from studio.settings import Settings
from studio.storage import db
from tests.support.processes import run_studio, studio_env


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"database_url": "postgresql+psycopg://postgres@127.0.0.1:1/nowhere"},
         "studio: error: database postgresql+psycopg://postgres@127.0.0.1:1/nowhere cannot be "
         "reached: "),
        ({"database_url": "postgresql+psycopg://postgres:secret@127.0.0.1:1/nowhere"},
         "studio: error: database postgresql+psycopg://postgres:***@127.0.0.1:1/nowhere cannot "),
        ({"database_url": "not a url"}, "studio: error: database not a url cannot be reached: "),
        ({"broker_url": "redis://127.0.0.1:1/0"},
         "studio: error: broker redis://127.0.0.1:1/0 cannot be reached: "),
    ],
    ids=["database-refused", "password-hidden", "database-malformed", "broker-refused"],
)
def test_bad_url_gives_one_line(settings, expected, tmp_path):
    done = run_studio(["up", "--port", "1"], studio_env(tmp_path / "data", **settings))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith(expected), done.stderr
    assert "secret" not in done.stderr + done.stdout
    assert "Traceback" not in done.stderr


def test_unwritable_data_dir_gives_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    done = run_studio(["up"], studio_env(blocker / "data"))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2
    assert lines == [f"studio: error: data directory {blocker / 'data'} is not writable "
                     "(Not a directory); set STUDIO_DATA_DIR or --data-dir to a folder you can "
                     "write"]


def test_worker_on_an_unmigrated_database_says_what_to_run(tmp_path):
    done = run_studio(["worker", "--queues", "cpu"], studio_env(tmp_path / "data"))
    assert done.returncode == 2
    assert done.stderr.strip().endswith("run `studio db upgrade` first")


# --- the CLI finds the studio, or says where it looked -----------------------------------------


def _env_without_a_studio(tmp_path):
    """The CLI's environment with no studio named: no STUDIO_DATA_DIR, its own user state."""
    env = studio_env(tmp_path / "unused")
    del env["STUDIO_DATA_DIR"]
    env["XDG_STATE_HOME"] = str(tmp_path / "user-state")
    return env


def _files_under(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_read_command_in_an_empty_folder_creates_nothing_and_says_where_it_looked(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = run_studio(["run", "list"], _env_without_a_studio(tmp_path), cwd=elsewhere)
    assert done.returncode == 2, done.stdout + done.stderr
    assert _files_under(tmp_path) == ["elsewhere"], "no studio-data, no database, no record"
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"studio: error: no studio found: no database in "
                           f"{elsewhere / 'studio-data'} (the default data directory")
    assert "no `studio up` is running" in line
    assert "--data-dir DIR or STUDIO_DATA_DIR" in line
    assert "revision None" not in line and "Traceback" not in done.stderr

    named = run_studio(["user", "list", "--data-dir", str(tmp_path / "nothing")],
                       _env_without_a_studio(tmp_path), cwd=elsewhere)
    assert named.returncode == 2
    assert named.stderr.startswith(f"studio: error: no studio in {tmp_path / 'nothing'}: it "
                                   "holds no database (studio.db)")
    assert _files_under(tmp_path) == ["elsewhere"]


def test_the_cli_finds_the_studio_that_studio_up_recorded_while_it_runs(tmp_path, monkeypatch):
    settings = Settings(data_dir=tmp_path / "data")
    settings.resolved_data_dir.mkdir()
    db.upgrade(settings.sqlalchemy_url)
    env = _env_without_a_studio(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
    record = locate.write_record(settings, "http://127.0.0.1:7860/")  # as `studio up`: our pid
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    done = run_studio(["run", "list"], env, cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ID", "NAME", "STATE", "STEP", "QUEUE", "BACKEND", "CREATED",
                                   "(UTC)"]
    assert list(elsewhere.iterdir()) == []

    ended = subprocess.Popen(["true"])
    ended.wait()
    record.write_text(json.dumps({**json.loads(record.read_text()), "pid": ended.pid}))
    stopped = run_studio(["run", "list"], env, cwd=elsewhere)
    assert stopped.returncode == 2
    assert (f"the last `studio up` (pid {ended.pid}, not running) kept its data in "
            f"{settings.resolved_data_dir}: add --data-dir {settings.resolved_data_dir} to use it"
            in stopped.stderr)
    assert list(elsewhere.iterdir()) == []


def test_the_data_dir_and_what_the_studio_writes_are_its_users_alone(tmp_path):
    """They held the team's data and password hashes readable by every local user
    (`studio.db` was 0644)."""
    data = tmp_path / "data"
    done = run_studio(["db", "upgrade"], studio_env(data))
    assert done.returncode == 0, done.stderr
    assert data.stat().st_mode & 0o777 == 0o700
    assert (data / "studio.db").stat().st_mode & 0o777 == 0o600
    (data / "studio.db").chmod(0o644)  # written by an older studio
    assert run_studio(["db", "upgrade"], studio_env(data)).returncode == 0
    assert (data / "studio.db").stat().st_mode & 0o777 == 0o600
