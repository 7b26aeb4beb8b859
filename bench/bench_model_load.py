"""Time a shelf model's one-time conversion against loading it from the cache.

    .venv/bin/python bench/bench_model_load.py            # fresh temp data dir, 3 cached loads
    .venv/bin/python bench/bench_model_load.py --repeats 5 --keep /tmp/bench-data
    .venv/bin/python bench/bench_model_load.py --model gemma-3-270m   # another shelf model
    .venv/bin/python bench/bench_model_load.py --quick    # a tiny GGUF: checks the script

* Conversion: ``resolve_model(MODEL, data_dir)`` on an empty data dir (MODEL: the bundled
  SmolLM2 unless ``--model`` names another shelf entry), with the time of each stage taken
  from the progress messages.
* Cached: ``resolve_model`` alone, then ``load_tokenizer`` + ``load_causal_lm``
  (fp32) in this process; medians over ``--repeats`` runs. torch and
  transformers are imported before the clock starts.

Nothing is asserted; it prints a markdown table.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


QUICK_MODEL = "bench-tiny"


def register_tiny_model(folder: Path) -> str:
    """A shelf entry whose 'package' is a tiny GGUF written into `folder` (--quick)."""
    from studio.models import base_models as bm
    from tests.support.tiny_gguf import write_tiny_gguf
    from tests.support.tiny_model import build_tiny_model

    gguf = write_tiny_gguf(build_tiny_model(folder / "source"), folder / "tiny.gguf")
    bm.register_packaged_model(bm.PackagedModel(
        name=QUICK_MODEL, title="Tiny", upstream="bench/tiny", licence="apache-2.0",
        pip_name="none", locate=lambda: [gguf], max_probe_perplexity=float("inf")))
    return QUICK_MODEL


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--keep", type=Path, help="data dir to use and keep (default: a temp dir, removed)"
    )
    parser.add_argument("--model", help="a shelf model's name (`studio models list`); "
                        "default: the bundled SmolLM2")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny random model packaged as a GGUF, 1 cached load")
    args = parser.parse_args(argv)

    import torch
    import transformers  # noqa: F401 - import time is not load time

    torch.set_num_threads(1)
    from studio.models import base_models as bm

    data_dir = args.keep or Path(tempfile.mkdtemp(prefix="bench-model-load-"))
    if args.quick:
        args.model, args.repeats = register_tiny_model(data_dir / "package"), 1
    model = args.model or bm.DEFAULT_MODEL
    if bm.packaged_model(model) is None:
        parser.error(f"--model: {model!r} is not one of {', '.join(bm.PACKAGED_MODELS)}")
    if bm.is_converted_model_dir(bm.models_dir(data_dir) / model):
        parser.error(f"{data_dir} already holds a converted {model}; give an empty --keep folder")
    try:
        stages: list[tuple[float, str]] = []
        started = time.perf_counter()
        bm.resolve_model(model, data_dir,
                         on_progress=lambda m: stages.append((time.perf_counter(), m)))
        convert_s = time.perf_counter() - started

        resolve_s, load_s = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            bm.resolve_model(model, data_dir)
            t1 = time.perf_counter()
            bm.load_tokenizer(model, data_dir)
            bm.load_causal_lm(model, data_dir)
            t2 = time.perf_counter()
            resolve_s.append(t1 - t0)
            load_s.append(t2 - t1)
    finally:
        if args.keep is None:
            shutil.rmtree(data_dir, ignore_errors=True)

    print(f"\n{model}: torch {torch.__version__}, transformers {transformers.__version__}, "
          "1 thread\n")
    print("| stage of the first conversion | seconds |")
    print("|---|---|")
    marks = stages + [(started + convert_s, "end")]
    for (t_start, message), (t_end, _) in zip(marks, marks[1:], strict=False):
        if message == marks[-2][1]:
            break
        print(f"| {message.rsplit(': ', 1)[-1]} | {t_end - t_start:.1f} |")
    print(f"| **total conversion** | **{convert_s:.1f}** |")
    print()
    print(f"| cached (median of {args.repeats}) | seconds |")
    print("|---|---|")
    print(f"| resolve_model | {statistics.median(resolve_s):.4f} |")
    print(f"| load_tokenizer + load_causal_lm | {statistics.median(load_s):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
