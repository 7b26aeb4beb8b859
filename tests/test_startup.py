"""A broken setting gives one clear line at start-up, not a traceback."""

from __future__ import annotations

import pytest

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
