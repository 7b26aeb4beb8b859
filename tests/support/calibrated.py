"""A worker's measured device, as the time estimate reads it: a heartbeat naming the device
and a calibration finished with fixed figures (the estimate tests and the progress tests)."""

from __future__ import annotations

from studio.services import calibrations
from studio.storage import db
from studio.storage.tables import WorkerHeartbeat

FIGURES = {"shape": {"linear": 2.0e8, "head": 5.0e7, "attention": 7.0e4},
           "rates": {"prefill": 2.0e11, "decode": 3.0e11, "decode_forward": 0.01,
                     "reference": 3.0e11, "update": 8.0e10, "optimizer_step": 0.1},
           "measure_seconds": 20.0, "measure_cpu_seconds": 19.0}
CPU = {"kind": "cpu", "name": "Test CPU, 2 cores", "torch": "2.0",
       "key": "cpu: Test CPU, 2 cores; torch 2.0"}


def worker_with(settings, device=CPU, hostname="cpu@test") -> None:
    with db.session_scope(settings.sqlalchemy_url) as session:
        session.merge(WorkerHeartbeat(hostname=hostname, queues="cpu", pid=1,
                                      devices={"cpu": device}))


def measured(settings, calibration_id: int, device=CPU, figures=FIGURES, busy=0) -> None:
    assert calibrations.claim_calibration(settings, calibration_id, "cpu@test", device)
    if busy:
        with db.session_scope(settings.sqlalchemy_url) as session:
            session.get(calibrations.DeviceCalibration, calibration_id).busy_runs = busy
    calibrations.finish_calibration(settings, calibration_id, figures=figures)
