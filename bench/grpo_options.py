"""Each GRPO option family trains: a few steps of the native engine per family, on CPU.

    .venv/bin/python bench/grpo_options.py              # the bundled SmolLM2, 2 steps a family
    .venv/bin/python bench/grpo_options.py --steps 5 --family dapo --family gspo
    .venv/bin/python bench/grpo_options.py --quick      # a tiny random model: checks the script

Every family starts from the quick-start preset (`studio.services.presets`: the demo pack,
LoRA, 2 questions x 4 answers a step) with one stage of `--exemplars` (default 1, so that
rewards can spread from the first step without the 3-exemplar prompt's cost), and changes
only its own `grpo:` keys (docs/engine.md, "GRPO options").
Same seed for all: the first step's rollouts are the same in every family, so its reward
column differs only where a family reshapes the reward. Prints one row per family: its
options, the last step's metrics and the median seconds per step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.actors import admin  # noqa: E402

FAMILIES: dict[str, dict] = {
    "paper (GRPO)": {},
    "Dr. GRPO": {"norm_adv_by_std": False, "loss_agg_mode": "seq-mean-token-sum-norm"},
    "DAPO": {"clip_high": 0.28, "dynamic_sampling": True, "dynamic_sampling_max_batches": 2,
             "overlong_buffer": 128, "overlong_penalty": 1.0},
    "GSPO": {"ratio_level": "sequence", "clip": 3e-4, "clip_high": 4e-4,
             "loss_agg_mode": "seq-mean-token-mean"},
    "dual clip": {"dual_clip": 3.0},
    "KL k1 in the loss": {"kl_estimator": "k1"},
    "KL k2 in the loss": {"kl_estimator": "k2"},
    "KL k3 in the reward": {"kl_in": "reward"},
    "PPO epochs 2, mini-batches 2": {"ppo_epochs": 2, "mini_batch_size": 1},
}
"""The option families, as `grpo:` keys over the preset (mini_batch_size counts questions)."""

COLUMNS = ("reward_mean", "loss", "pg_loss", "kl", "clip_frac", "entropy", "grad_norm")


def family_config(settings, grpo: dict, steps: int, exemplars: int, model: str | None,
                  name: str) -> dict:
    from studio.services.presets import QUICK_START, preset_config

    config = preset_config(QUICK_START, settings)
    config["name"] = f"grpo-options-{name}"
    config["curriculum"] = {"stages": [{"exemplars": exemplars, "steps": steps}]}
    config["grpo"].update(grpo)
    config["engine"].update(evaluate_at_end=False, checkpoint_every=steps)
    if model:
        config["model"] = model
    return config


def train(settings, config: dict) -> tuple[list[dict], float]:
    """The run's metrics per step and its median seconds per step."""
    from studio.services import runs
    from worker.engines.native.trainer import Trainer

    run = runs.create_run(settings, admin(settings), config, start=False)
    Trainer(settings, run["id"]).run()
    rows = runs.run_metrics(settings, run["id"])
    return rows, statistics.median(r["time_step"] for r in rows)


def options_words(grpo: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in grpo.items()) or "defaults (method.md)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--exemplars", type=int, default=1)
    parser.add_argument("--family", action="append", choices=list(FAMILIES),
                        help="default: every family")
    parser.add_argument("--model", help="default: the preset's (the bundled SmolLM2)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/grpo-options"))
    parser.add_argument("--quick", action="store_true",
                        help="a tiny random model, 2 steps: checks the script")
    args = parser.parse_args(argv)

    import torch

    from studio.services import demo
    from studio.settings import Settings
    from studio.storage import db

    torch.set_num_threads(args.threads)
    if args.quick:
        from tests.support.tiny_model import build_tiny_model

        args.model = str(build_tiny_model(args.data_dir / "models" / "tiny"))
        args.steps = 2
    settings = Settings(data_dir=args.data_dir)
    settings.resolved_data_dir.mkdir(parents=True, exist_ok=True)
    db.upgrade(settings.sqlalchemy_url)
    demo.load_demo_pack(settings, admin(settings), index_now=True)

    chosen = args.family or list(FAMILIES)
    print(f"# GRPO option families: {args.model or 'the bundled SmolLM2'}, quick-start preset "
          f"(LoRA, 2 questions x 4 answers), {args.exemplars} exemplar(s), {args.steps} steps "
          "each, "
          f"{args.threads} threads; metrics of the last step\n")
    print("| family | options | steps | " + " | ".join(COLUMNS) + " | s/step (median) |")
    print("|---|---|---|" + "---|" * len(COLUMNS) + "---|")
    for i, family in enumerate(chosen):
        grpo = FAMILIES[family]
        t0 = time.time()
        rows, step_seconds = train(settings, family_config(
            settings, grpo, args.steps, args.exemplars, args.model, str(i)))
        last = rows[-1]
        cells = " | ".join(f"{last[key]:.4g}" for key in COLUMNS)
        print(f"| {family} | {options_words(grpo)} | {len(rows)} | {cells} | "
              f"{step_seconds:.1f} |", flush=True)
        print(f"  ({time.time() - t0:.0f} s in all)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
