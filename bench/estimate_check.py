"""The Launch page's time estimate of each ready-made run against its measured steps.

    .venv/bin/python bench/estimate_check.py --calibration figures.json
    .venv/bin/python bench/estimate_check.py            # measures the figures first (~1 min)
    .venv/bin/python bench/estimate_check.py --preset calculator --steps-from studio.db ...

For each preset with measured steps: the estimate the Launch page shows, through the same
calls (`run_validation.validate_run`, then `presets.expected_time` with the calibration it
used), in a fresh studio whose worker's calibration holds `--calibration`'s figures (the
JSON `python -m worker.engines.native.calibrate` prints, or measured here with the run's
dtype and threads). Beside it, the measured steps: the preset's stored results
(`studio/demo/measured`), or `--steps-from` a studio database's `run_metrics` (opened read
only: a run in progress). Prints a markdown table: per stage and for the run, the estimate
(expected and at most) and the median measured step, with each phase, and their ratio.
The measured side's machine and load are the stored results' `machine`, or `--machine`.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PHASES = ("rollout", "reference", "update")


def measure_figures(model: str, dtype: str, threads: int, data_dir: Path) -> dict:
    """A calibration's figures, measured in a fresh process as the worker measures them."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "STUDIO_DATA_DIR": str(data_dir)}
    out = subprocess.run([sys.executable, "-m", "worker.engines.native.calibrate", model,
                          "--dtype", dtype, "--threads", str(threads)],
                         env=env, cwd=ROOT, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def calibrated_studio(data_dir: Path, figures: dict):
    """A fresh studio in `data_dir` whose cpu worker has a finished calibration with
    `figures`."""
    from studio.jobs.devices import queue_device
    from studio.services import auth, calibrations
    from studio.settings import Settings
    from studio.storage import db
    from studio.storage.tables import WorkerHeartbeat

    settings = Settings(data_dir=data_dir)
    db.upgrade(settings.sqlalchemy_url)
    with db.session_scope(settings.sqlalchemy_url) as session:
        auth.bootstrap_admin(session)
    actor = auth.first_admin(settings)
    device = queue_device("cpu")
    with db.session_scope(settings.sqlalchemy_url) as session:
        session.merge(WorkerHeartbeat(hostname="bench@estimate", queues="cpu", pid=os.getpid(),
                                      devices={"cpu": device}))
    queued = calibrations.request_calibration(
        settings, actor, model=settings.default_model, threads=figures.get("threads", 1),
        dtype=figures.get("dtype", "auto"), start=False)
    calibrations.claim_calibration(settings, queued["id"], "bench@estimate", device)
    calibrations.finish_calibration(settings, queued["id"], figures=figures)
    return settings, actor


def steps_from(database: Path) -> list[dict]:
    """Every training step's figures in a studio database's `run_metrics`, read only."""
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as conn:
        return [json.loads(values) for (values,) in conn.execute(
            'SELECT "values" FROM run_metrics ORDER BY run_id, step')]


def measured_phases(steps: list[dict]) -> dict[str, float]:
    """Median seconds of each phase and of the step; every stage must have measured steps."""
    if not steps:
        raise SystemExit("a stage of the preset has no measured step")
    return {phase: statistics.median(s[f"time_{phase}"] for s in steps)
            for phase in (*PHASES, "step")}


def check(settings, actor, name: str, steps: list[dict], machine: str
          ) -> tuple[list[str], dict]:
    """The table's rows for preset `name` (each stage, then the run: the estimate's mean over
    the measured steps' stages against their mean) and what they came from."""
    from studio.services import presets, run_validation

    config = presets.prepare_preset(settings, actor, name)
    report = run_validation.validate_run(settings, actor, config)
    timing = report["time_estimate"]
    if timing["state"] != "ready":
        raise SystemExit(f"{name}: no estimate: {timing['message']}")
    expected = presets.expected_time(settings, name, timing, report["stages"],
                                     [{"steps": steps}])
    rows, measured, weighted = [], [], 0.0
    for number, (row, worst) in enumerate(zip(expected["stages"], timing["stages"],
                                              strict=True)):
        stage = [s for s in steps if s["stage"] == number]
        seen = measured_phases(stage)
        measured.append({"steps": len(stage), **seen})
        weighted += len(stage) * row["seconds_per_step"]
        split = " / ".join(f"{row[f'{p}_seconds']:.1f}" for p in PHASES)
        took = " / ".join(f"{seen[p]:.1f}" for p in PHASES)
        rows.append(f"| {name} | {row['exemplars']} exemplars ({len(stage)} steps) | "
                    f"{row['seconds_per_step']:.1f} ({split}) | {worst['seconds_per_step']:.1f}"
                    f" | {seen['step']:.1f} ({took}) | "
                    f"{row['seconds_per_step'] / seen['step']:.2f} | {machine} |")
    about = weighted / len(steps)
    mean = statistics.fmean(s["time_step"] for s in steps)
    rows.append(f"| {name} | the run, per step (mean) | {about:.1f} | "
                f"{timing['total_seconds'] / timing['total_steps']:.1f} | {mean:.1f} | "
                f"{about / mean:.2f} | {machine} |")
    typical = presets.typical_responses(steps, len(report["stages"]))
    return rows, {"config": config, "stages": report["stages"],
                  "typical": [vars(t) for t in typical], "measured": measured,
                  "machine": machine}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", action="append",
                        help="a ready-made run (repeat; default: every one with measured steps)")
    parser.add_argument("--calibration", type=Path,
                        help="figures from `python -m worker.engines.native.calibrate` "
                        "(or a --record of this bench)")
    parser.add_argument("--models", type=Path,
                        help="a folder of converted models (a studio data dir's models/): "
                        "without it the default model is converted here first")
    parser.add_argument("--steps-from", type=Path, action="append",
                        help="a studio database whose runs are the (one) preset's (repeat)")
    parser.add_argument("--machine", help="what ran the measured steps, and beside them")
    parser.add_argument("--record", type=Path,
                        help="also write the figures, the stages, the typical responses and "
                        "the measured medians here (JSON; the tests' recorded fixture)")
    args = parser.parse_args(argv)

    from studio.services import presets
    from studio.settings import Settings

    names = args.preset or [n for n in presets.RUN_PRESETS if presets.measured_runs(n)]
    if args.steps_from and len(names) != 1:
        parser.error("--steps-from: name the one --preset its runs are")
    with tempfile.TemporaryDirectory(prefix="estimate-check-") as tmp:
        data_dir = Path(tmp)
        if args.models is not None:
            (data_dir / "models").symlink_to(args.models.resolve())
        if args.calibration:
            given = json.loads(args.calibration.read_text())
            figures = given.get("figures", given)  # a --record of this bench holds them too
        else:
            figures = measure_figures(Settings().default_model, "float32", 1, data_dir)
        settings, actor = calibrated_studio(data_dir, figures)
        print(f"calibration: {figures['dtype']}, {figures['threads']} thread(s); measured in "
              f"{figures['measure_seconds']:.0f} s, {figures['measure_cpu_seconds']:.0f} s of "
              "CPU\n")
        print("| preset | stage | estimate, expected (rollout / reference / update) | "
              "at most | measured, median (rollout / reference / update) | "
              "expected / measured | measured on |")
        print("|---|---|---|---|---|---|---|")
        records = {}
        for name in names:
            if args.steps_from:
                steps = [s for database in args.steps_from for s in steps_from(database)]
                machine = args.machine or "?"
            else:
                runs = presets.measured_runs(name)
                steps = [s for run in runs for s in run["steps"]]
                machine = args.machine or "; ".join(sorted({r["machine"] for r in runs}))
            rows, records[name] = check(settings, actor, name, steps, machine)
            print("\n".join(rows))
    if args.record:
        args.record.write_text(json.dumps({"figures": figures, "presets": records},
                                          indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
