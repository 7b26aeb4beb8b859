"""Does the exemplar curriculum help? SmolLM2-135M, 3-2-0 against exemplar-free RL (`0`).

Both arms train for the same steps on HotpotQA train questions with their own
passages as the corpus (../shared/data/hotpotqa-train100), then the base
model and each trained model are evaluated zero-shot on held-out questions of
the same set: valid-search rate, answer rate and EM. Prints a table, writes
the per-step curves as an HTML plot and a PNG, and a JSON of everything.

    python bench/icrl_effect.py --steps 30
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import plotly.graph_objects as go
import torch

from studio import db, demo
from studio.services import corpora, evaluations, exemplar_sets, qa_sets, runs
from studio.settings import Settings
from worker.engines.native.trainer import Trainer
from worker.evaluation import run_evaluation

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "hotpotqa-train100"
ARMS = {"3-2-0": None, "0": None}


def setup(settings: Settings, eval_questions: int) -> None:
    settings.resolved_data_dir.mkdir(parents=True, exist_ok=True)
    db.upgrade(settings.sqlalchemy_url)
    if any(c["name"] == "hotpot" for c in corpora.list_corpora(settings)):
        return
    with open(DATA / "corpus.jsonl", "rb") as f:
        corpus = corpora.create_corpus(settings, f, "corpus.jsonl", "hotpot", start_indexing=False)
    corpora.build_corpus_index(settings, corpus["id"])
    with open(DATA / "qa.jsonl", "rb") as f:
        qa = qa_sets.create_qa_set(settings, f, "qa.jsonl", "hotpot")
    qa_sets.split_qa_set(settings, qa["id"], eval_fraction=eval_questions / qa["num_rows"],
                         seed=0)
    with open(demo.EXEMPLARS, "rb") as f:
        exemplar_sets.upload_exemplar_set(settings, f, "exemplars.jsonl", "demo")


def config(arm: str, args) -> dict:
    per_stage = max(1, args.steps // len(arm.split("-")))
    stages = [{"exemplars": int(k), "steps": per_stage} for k in arm.split("-")]
    stages[-1]["steps"] = args.steps - per_stage * (len(stages) - 1)
    return {
        "name": f"icrl-effect-{arm}", "model": "smollm2-135m-instruct",
        "data": {"corpus": "hotpot", "train": "hotpot-train", "exemplars": "demo"},
        "curriculum": {"stages": stages},
        "prompt": {"layout": "chat", "assistant_prefix": "<think>"},
        "grpo": {"steps": args.steps, "batch_size": args.batch, "group_size": args.group,
                 "lr": args.lr, "max_turns": 2, "max_turn_tokens": args.turn_tokens,
                 "max_response_tokens": 3 * args.turn_tokens + 400, "max_obs_tokens": 200,
                 "micro_batch_size": 4, "temperature": 1.0},
        "engine": {"checkpoint_every": args.steps, "log_groups_per_step": 1},
        "seed": 0,
    }


def evaluate(settings: Settings, args, **target) -> dict:
    protocol = {"max_turn_tokens": args.turn_tokens, "max_turns": 2,
                "max_response_tokens": 3 * args.turn_tokens + 400, "max_obs_tokens": 200}
    created = evaluations.create_evaluation(settings, qa_set="hotpot-eval", corpus="hotpot",
                                            protocol=protocol, start=False, **target)
    return run_evaluation(settings, created["id"])["metrics"]


def plot_png(curves: dict[str, list[dict]], path: Path) -> None:
    """The training curves as a picture for the docs: valid-search rate and reward per step,
    one line per arm, with the exemplar count of each step as a step line beneath."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 1]})
    for arm, rows in curves.items():
        steps = [r["step"] for r in rows]
        line = top.plot(steps, [r["valid_search_rate"] for r in rows], marker="o",
                        label=f"{arm}: valid-search rate")[0]
        top.plot(steps, [r["reward_mean"] for r in rows], linestyle=":",
                 color=line.get_color(), label=f"{arm}: reward mean")
        bottom.step(steps, [r["exemplars"] for r in rows], where="post",
                    color=line.get_color(), label=arm)
    top.set_ylabel("training rollouts")
    top.set_title("Training: 3-2-0 curriculum against exemplar-free RL")
    top.legend(fontsize=8)
    bottom.set_ylabel("exemplars")
    bottom.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--turn-tokens", type=int, default=96)
    parser.add_argument("--eval-questions", type=int, default=20)
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/icrl-effect"))
    parser.add_argument("--out", type=Path, default=Path("/tmp/icrl-effect/icrl_effect"),
                        help="writes OUT.html (the curves) and OUT.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    settings = Settings(data_dir=args.data_dir)
    setup(settings, args.eval_questions)

    t0 = time.time()
    results = {"base": evaluate(settings, args, model="smollm2-135m-instruct")}
    curves = {}
    for arm in ARMS:
        run = runs.create_run(settings, config(arm, args), start=False)
        Trainer(settings, run["id"]).run()
        curves[arm] = runs.run_metrics(settings, run["id"])
        results[arm] = evaluate(settings, args, run_id=run["id"])
    minutes = (time.time() - t0) / 60

    print(f"# ICRL effect: SmolLM2-135M, {args.steps} steps of {args.batch} questions x "
          f"{args.group} samples, lr {args.lr}; zero-shot on {args.eval_questions} held-out "
          f"HotpotQA questions ({minutes:.0f} min)\n")
    print("| model | valid-search rate | answer rate | EM | SubEM | F1 | search calls |")
    print("|---|---|---|---|---|---|---|")
    for name, m in results.items():
        label = "base (no training)" if name == "base" else f"trained, curriculum {name}"
        print(f"| {label} | {m['valid_search_rate']:.2f} | {m['answer_rate']:.2f} | "
              f"{m['em']:.3f} | {m['subem']:.3f} | {m['f1']:.3f} | {m['search_calls']:.2f} |")

    figure = go.Figure()
    for arm, rows in curves.items():
        steps = [r["step"] for r in rows]
        for key, dash in (("reward_mean", None), ("valid_search_rate", "dot")):
            figure.add_scatter(x=steps, y=[r[key] for r in rows], name=f"{arm}: {key}",
                               line={"dash": dash})
    figure.update_layout(title="Training curves: 3-2-0 against exemplar-free RL",
                         xaxis_title="step")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figure.write_html(args.out.with_suffix(".html"), include_plotlyjs=True)
    plot_png(curves, args.out.with_suffix(".png"))
    args.out.with_suffix(".json").write_text(json.dumps(
        {"args": {k: str(v) for k, v in vars(args).items()}, "results": results,
         "curves": curves}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
