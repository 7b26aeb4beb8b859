"""Time the export of a real-size checkpoint: folder (hard links vs copies), zip, Hub push.

    .venv/bin/python bench/export.py                       # the bundled SmolLM2-135M (fp32)
    .venv/bin/python bench/export.py --model PATH --repeats 3 --data-dir /tmp/bench-export

The checkpoint is the model folder written the way the trainer writes one
(`runs/<id>/checkpoints/step-1/`). Each row is a whole export job
(`worker.export.run_export`: files, model card with its image, run.yaml, then the
target); the push goes to the local Hub of tests/support/hub_server.py on 127.0.0.1
through huggingface_hub's LFS protocol (sha256, pre-upload, PUT, commit), so it
measures the studio's and the client's work, not a network. Medians over --repeats.
Nothing is asserted; it prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.actors import admin  # noqa: E402

TOKEN = "hf_benchToken"


@contextmanager
def no_hard_links():
    """Make the export copy its files, as on a data directory that refuses hard links."""
    real = os.link

    def refuse(*_args, **_kwargs):
        raise OSError("hard links refused for the benchmark")

    os.link = refuse
    try:
        yield
    finally:
        os.link = real


def prepare(data_dir: Path, model: str) -> tuple[object, int]:
    from studio.models.base_models import resolve_model
    from studio.services import runs
    from studio.services.demo import load_demo_pack
    from studio.settings import Settings
    from studio.storage import db

    settings = Settings(data_dir=data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    db.upgrade(settings.sqlalchemy_url)
    load_demo_pack(settings, admin(settings), index_now=True)
    folder = resolve_model(model, data_dir)
    run = runs.create_run(settings, admin(settings), {
        "name": "bench export", "model": str(folder),
        "data": {"corpus": "demo", "train": "demo", "exemplars": "demo"}}, start=False)
    checkpoint = data_dir / "runs" / str(run["id"]) / "checkpoints" / "step-1"
    shutil.copytree(folder, checkpoint)
    return settings, run["id"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, help="default: a temp dir, removed")
    args = parser.parse_args(argv)

    import huggingface_hub.constants as hf_constants

    from studio.services import exports
    from tests.support.hub_server import LocalHub
    from worker.export import run_export

    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="bench-export-"))
    settings, run_id = prepare(data_dir, args.model)
    hf_constants.HF_HUB_DISABLE_XET = True
    timings: dict[str, list[float]] = {}

    def timed(name: str, target: str, **request) -> dict:
        created = exports.create_export(settings, admin(settings), run_id, target=target,
                                        start=False, **request)
        started = time.perf_counter()
        done = run_export(settings, created["id"])
        timings.setdefault(name, []).append(time.perf_counter() - started)
        if done["state"] != "succeeded":
            sys.exit(f"{name}: {done['error']}")
        return done

    try:
        for repeat in range(args.repeats):
            timed("folder, hard links", "folder")
            with no_hard_links():
                timed("folder, copies", "folder")
            timed("zip (weights stored, text deflated)", "zip")
            with LocalHub({TOKEN: "bench"}) as hub:
                hf_constants.ENDPOINT = hub.url
                timed("hub push (local Hub, LFS)", "hub", repo_id=f"bench/run-{repeat}",
                      token=TOKEN)
        weights = sum(p.stat().st_size for p in (data_dir / "runs" / str(run_id)).rglob("*")
                      if p.is_file())
        print(f"\nexport of {args.model} ({weights / 1e6:.0f} MB checkpoint), "
              f"median of {args.repeats}\n")
        print("| export | seconds | MB/s |")
        print("|---|---|---|")
        for name, seconds in timings.items():
            median = statistics.median(seconds)
            print(f"| {name} | {median:.2f} | {weights / 1e6 / median:.0f} |")
    finally:
        if args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
