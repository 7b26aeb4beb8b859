"""Mirroring a run's metrics to TensorBoard (`mirror.tensorboard`): the event files, read back
with TensorBoard's own reader, hold exactly the studio's rows, once per step, also after a
resumed attempt re-wrote steps; a real worker mirrors a training run; a mirror that cannot
write leaves a warning and the run trains on."""

from __future__ import annotations

import pytest
from sqlmodel import delete
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from studio.services import runs
from studio.storage import db
from studio.storage.tables import RunMetric
from tests.support.actors import admin
from tests.support.processes import running_worker, wait_for
from tests.support.synthetic_runs import finished_run
from tests.support.training import tiny_config
from worker.metrics_mirror import SCALAR_PREFIX, TensorBoardMirror, tensorboard_folder


def _scalars(settings, run_id: int, name: str) -> list[tuple[int, float]]:
    """(step, value) of one metric as TensorBoard shows it."""
    events = EventAccumulator(str(tensorboard_folder(settings, run_id)))
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars(SCALAR_PREFIX + name)]


def _rows(settings, run_id: int, name: str) -> list[tuple[int, float]]:
    return [(m["step"], m[name]) for m in runs.run_metrics(settings, run_id)]


def _assert_same(mirrored: list[tuple[int, float]], stored: list[tuple[int, float]]) -> None:
    """Same steps, same values (TensorBoard keeps float32)."""
    assert [s for s, _ in mirrored] == [s for s, _ in stored]
    assert [v for _, v in mirrored] == pytest.approx([v for _, v in stored], rel=1e-6)


def _rewrite_from(settings, run_id: int, step: int, steps: int, value: float) -> None:
    """What a resumed attempt does: delete the rows from `step` on and write them again."""
    with db.session_scope(settings.sqlalchemy_url) as session:
        session.exec(delete(RunMetric).where(RunMetric.run_id == run_id, RunMetric.step >= step))
    with db.session_scope(settings.sqlalchemy_url) as session:
        session.add_all([RunMetric(run_id=run_id, step=s, values={"reward_mean": value + s})
                         for s in range(step, steps)])


def test_the_event_files_hold_the_rows_once_per_step_across_a_resume(studio):  # noqa: F811
    settings, model = studio
    run_id = finished_run(settings, tiny_config(model), 6)
    first = TensorBoardMirror(settings, run_id)
    assert first.sync() == 6
    assert first.sync() == 0, "nothing new, nothing written"
    _rewrite_from(settings, run_id, 3, 6, value=10.0)
    assert first.sync() == 3
    first.close()
    _assert_same(_scalars(settings, run_id, "reward_mean"), _rows(settings, run_id, "reward_mean"))
    assert [s for s, _ in _scalars(settings, run_id, "reward_mean")] == list(range(6))

    # a later attempt's mirror starts from the first row and rewrites the files' history
    _rewrite_from(settings, run_id, 4, 6, value=20.0)
    second = TensorBoardMirror(settings, run_id)
    second.close()
    mirrored = _scalars(settings, run_id, "reward_mean")
    _assert_same(mirrored, _rows(settings, run_id, "reward_mean"))
    _assert_same(mirrored[3:], [(3, 13.0), (4, 24.0), (5, 25.0)])


def test_a_mirror_that_cannot_write_leaves_a_warning_once(studio):  # noqa: F811
    settings, model = studio
    run_id = finished_run(settings, tiny_config(model), 3)
    folder = tensorboard_folder(settings, run_id)
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.write_text("a file where the event folder should be")
    mirror = TensorBoardMirror(settings, run_id)
    assert mirror.sync() == 0
    assert mirror.sync() == 0
    mirror.close()
    warnings = [e["message"] for e in runs.run_events(settings, run_id, kind="warning")
                if "TensorBoard" in e["message"]]
    assert len(warnings) == 1 and warnings[0].startswith(
        "metrics are not mirrored to TensorBoard: "), warnings


@pytest.mark.slow
@pytest.mark.parametrize("migrated_db_url", ["sqlite"], indirect=True)
def test_a_worker_mirrors_a_training_run(studio, tmp_path):  # noqa: F811
    settings, model = studio
    config = {**tiny_config(model, steps=4), "mirror": {"tensorboard": True}}
    with running_worker(settings.resolved_data_dir, tmp_path / "worker.log",
                        database_url=settings.database_url, heartbeat_seconds="1"):
        run_id = runs.create_run(settings, admin(settings), config)["id"]
        final = wait_for(lambda: (r := runs.get_run(settings, run_id))["state"]
                         not in runs.ACTIVE_STATES and r, 240, "the run to end")
    assert final["state"] == "succeeded", final
    for name in ("reward_mean", "kl", "masked_fraction", "exemplars"):
        _assert_same(_scalars(settings, run_id, name), _rows(settings, run_id, name))
    assert [s for s, _ in _scalars(settings, run_id, "reward_mean")] == [0, 1, 2, 3]
