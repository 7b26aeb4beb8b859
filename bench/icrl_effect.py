"""Does the exemplar curriculum teach SmolLM2-135M to search on its own? Three arms.

    .venv/bin/python bench/icrl_effect.py                 # the quick-start preset (~25 min)
    .venv/bin/python bench/icrl_effect.py --lr 1e-4 --stages 3x10,2x8,0x12
    .venv/bin/python bench/icrl_effect.py --quick         # a tiny model: checks the script
    .venv/bin/python bench/icrl_effect.py --arms curriculum --seed 2   # a seed sweep's run
    .venv/bin/python bench/icrl_effect.py --top-k 1 --seed 1   # one passage per search
    .venv/bin/python bench/icrl_effect.py --pack math --stages 3x4,2x4,0x4 --turn-tokens 160
    .venv/bin/python bench/icrl_effect.py --pack calc --stages 3x6,2x6,0x10 --cross-search
    .venv/bin/python bench/icrl_effect.py --pack span --stages 3x6,2x6,0x10 --cross-search

Arms, on the same budget (steps, questions x samples per step) and seed, all from the
quick-start preset (`studio.services.presets`) unless a flag changes it:

* ``base``: the model, untrained;
* ``curriculum``: the preset's run as it is (exemplars 3 -> 2 -> 0 by default);
* ``exemplar-free``: the same run with no exemplar at any step (Search-R1's start);
* ``mixed``: the curriculum run with ``guidance.mode: mixed`` (studio.method.guidance):
  part of each group sampled with the stage's exemplars as a hint, every rollout trained
  on the prompt without them; ``--share``, ``--shaping``, ``--gamma`` and ``--when`` set
  its guidance. ``curriculum`` is then the ``shown`` arm.

``--pack calc`` asks the same of the calculator: the arithmetic pack (`studio demo --calc`)
instead of the demo world, `tools: [calculator]`, no corpus, numeric answer matching, and
the evaluation on `calc-heldout`; "valid call" is then a `<calc>` call. ``--pack math`` does
the same with the python tool and the math pack. ``--pack span`` stays with search but trains
on the demo's short-span questions (`demo-span`: one passage holds a date, count or name) and
evaluates on `demo-span-heldout`. ``--cross-search`` also evaluates the same models on the
search demo's held-out questions with the search tool, and prints its one-hop questions apart.
`bench/icrl_seeds.py` puts several seeds' results side by side.

The two trained arms train side by side, one process and one thread each (the machine's
two cores). Then each model is evaluated zero-shot (two processes side by side, each
taking every other evaluation) on the pack's held-out questions
(`demo-heldout`, `calc-heldout` or `math-heldout`: training never sees them) with the
protocol the preset's own end-of-run evaluation uses
(`studio.services.evaluations.run_protocol`: k = 0, temperature 0.1, the run's
instruction, at most `<think>` pre-filled, the run's token budgets). Prints the
table (valid-search rate, answer rate, EM, SubEM, F1, search calls, tool errors, and the
questions per failure label in the words of the evaluation's tool: with the calculator
"wrong expression", "copied wrong", ...), writes the training curves as OUT.png and
OUT.html and everything as OUT.json, and saves each trained arm's final model as a Hugging
Face folder (merged when the run used LoRA), printing its path: `studio eval --model FOLDER`
evaluates it on any other corpus.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.actors import admin  # noqa: E402

CURVES = ("valid_search_rate", "reward_mean", "acc", "answer_rate", "zero_shot_acc",
          "zero_shot_valid_search_rate", "guided_acc", "guided_valid_search_rate")
ARMS = ("base", "curriculum", "mixed", "exemplar-free")
DEFAULT_ARMS = ("base", "curriculum", "exemplar-free")
TOOL_PACKS = {"math": ("python", "math", "math-heldout"),
              "calc": ("calculator", "calc", "calc-heldout")}
"""--pack -> (the tool, the training QA and exemplar set, the held-out QA set)."""
PACKS = ("demo", "span", *TOOL_PACKS)
PRESET_PACKS = {"quick-start": "demo", "search-tour": "span", "calculator": "calc", "math": "math"}
"""Each ready-made run's own pack: --pack's default with --preset."""


def pack_of(args) -> str:
    """The pack the arms train on: --pack, else the preset's own."""
    return args.pack or PRESET_PACKS[args.preset]
EXEMPLAR_SET = "bench-exemplars"
SEARCH_PRESET = "quick-start"
"""The preset whose protocol --cross-search evaluates with (the search demo's)."""


def arm_configs(args, settings) -> dict[str, dict]:
    """The two trained arms' run configs: the preset with this run's flags, and its
    exemplar-free twin (every stage at 0 exemplars, the same total steps)."""
    from studio.services.presets import preset_config

    config = preset_config(args.preset, settings)
    if args.stages:
        config["curriculum"] = {"stages": [
            {"exemplars": int(k), "steps": int(n)}
            for k, n in (part.split("x") for part in args.stages.split(","))]}
    grpo = config["grpo"]
    for flag, key in (("lr", "lr"), ("batch", "batch_size"), ("group", "group_size"),
                      ("turn_tokens", "max_turn_tokens"), ("obs_tokens", "max_obs_tokens"),
                      ("temperature", "temperature"), ("top_k", "top_k"),
                      ("kl", "kl_coef"), ("turns", "max_turns"),
                      ("response_tokens", "max_response_tokens")):
        if getattr(args, flag) is not None:
            grpo[key] = getattr(args, flag)
    if args.lora_rank is not None:
        config["lora"] = {"rank": args.lora_rank, "alpha": 2 * args.lora_rank} \
            if args.lora_rank else None
    if args.model:
        config["model"] = args.model
    config["seed"] = args.seed
    if args.soft is not None:
        config["curriculum"]["soft"] = {"start": args.soft}
    if args.layout:
        config["prompt"]["layout"] = args.layout
    if args.exemplar_selection:
        config["prompt"]["exemplar_selection"] = args.exemplar_selection
    if args.format_weight is not None:
        config["reward"] = {**config.get("reward", {}), "format_weight": args.format_weight}
    if pack_of(args) != PRESET_PACKS[args.preset]:
        retarget(config, pack_of(args))
    if args.exemplars:
        config["data"]["exemplars"] = EXEMPLAR_SET
    config["engine"]["evaluate_at_end"] = False  # the bench evaluates every arm itself
    if args.dtype:
        config["engine"]["dtype"] = args.dtype
    if args.call_bonus is not None:
        config["reward"] = {**config.get("reward", {}), "call_bonus": args.call_bonus}
    config.setdefault("guidance", {"mode": "shown"})
    total = sum(stage["steps"] for stage in config["curriculum"]["stages"])
    free = json.loads(json.dumps(config))
    free["curriculum"] = {"stages": [{"exemplars": 0, "steps": total}]}
    mixed = json.loads(json.dumps(config))
    mixed["guidance"] = {"mode": "mixed", "share": args.share, "shaping": args.shaping,
                         "gamma": args.gamma, "when": args.when}
    curriculum = "-".join(str(s["exemplars"]) for s in config["curriculum"]["stages"])
    soft = f"-soft{args.soft:g}" if args.soft is not None else ""
    config["name"], free["name"] = f"icrl-effect-{curriculum}{soft}", "icrl-effect-exemplar-free"
    mixed["name"] = f"icrl-effect-{curriculum}-mixed"
    return {"curriculum": config, "mixed": mixed, "exemplar-free": free}


def retarget(config: dict, pack: str) -> None:
    """`config` moved onto another pack's questions (and tool)."""
    if pack in TOOL_PACKS:
        tool, train, heldout = TOOL_PACKS[pack]
        config["tools"] = [tool]
        config["data"] = {"train": train, "exemplars": train, "eval": [heldout]}
        config["reward"] = {**config.get("reward", {}), "answer_match": "numeric"}
    elif pack == "span":
        from studio.services import demo

        config["data"] = {**config["data"], "train": demo.SPAN_NAME,
                          "eval": [demo.SPAN_HELDOUT_NAME]}


def child(argv: list[str], data_dir: Path, log: Path) -> None:
    """This script in a fresh one-thread process (one arm's training or evaluation)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "STUDIO_DATA_DIR": str(data_dir)}
    with open(log, "ab") as out:
        code = subprocess.call([sys.executable, __file__, *argv, "--data-dir", str(data_dir)],
                               stdout=out, stderr=subprocess.STDOUT, env=env)
    if code:
        raise RuntimeError(f"{' '.join(argv)} exited with {code}; see {log}")


def run_child(args) -> int:
    import torch

    torch.set_num_threads(1)
    from studio.settings import Settings

    settings = Settings(data_dir=args.data_dir)
    kind, *idents = args.child
    if kind == "train":
        from worker.engines.native.trainer import Trainer

        (ident,) = idents
        Trainer(settings, int(ident)).run()
    else:
        from worker.evaluation import run_evaluation

        for ident in idents:
            run_evaluation(settings, int(ident))
    return 0


def trained_arms(settings, configs: dict[str, dict], arms: list[str]) -> tuple[dict, float]:
    """`--evaluate-only`: each trained arm's latest run of its config's name in the data
    dir (all its steps done), and the minutes its steps took (the slowest arm's, as they
    trained side by side; the model's loading not counted)."""
    from studio.services import runs

    created, minutes = {}, 0.0
    for arm in (a for a in arms if a in configs):
        named = runs.runs_named(settings, configs[arm]["name"])
        run = runs.get_run(settings, named[-1]) if named else None
        if run is None or run["current_step"] < run["total_steps"]:
            raise SystemExit(f"--evaluate-only: no fully trained run of arm '{arm}' "
                             f"({configs[arm]['name']}) in this data dir; train it first")
        created[arm] = run
        minutes = max(minutes, sum(m["time_step"] for m in runs.run_metrics(
            settings, run["id"])) / 60)
    return created, minutes


def queue_evaluations(settings, args, targets: dict[str, dict], qa_set: str,
                      corpus: str | None, protocol: dict) -> dict[str, int]:
    """Each target (a model or a run) queued for a zero-shot evaluation on `qa_set` under
    `protocol`, not started (`run_evaluations` runs them): their ids by arm."""
    from studio.services import evaluations

    return {arm: evaluations.create_evaluation(
        settings, admin(settings), qa_set=qa_set, corpus=corpus, limit=args.limit,
        protocol=protocol, start=False, **target)["id"] for arm, target in targets.items()}


def run_evaluations(data_dir: Path, ids: list[int]) -> None:
    """The evaluations in two one-thread processes side by side, each taking every other one
    in turn: a process per evaluation would import torch once per evaluation, which takes
    longer than evaluating a small model."""
    shares = [share for share in (ids[0::2], ids[1::2]) if share]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda share: child(
            ["--child", "eval", *map(str, share)], data_dir,
            data_dir / "logs" / f"eval-{'-'.join(map(str, share))}.log"), shares))


def evaluation_metrics(settings, ids: dict[str, int]) -> dict[str, dict]:
    """The finished evaluations' metrics by arm."""
    from studio.services import evaluations

    return {arm: evaluations.get_evaluation(settings, ident)["metrics"]
            for arm, ident in ids.items()}


def one_hop_metrics(settings, evaluation_id: int) -> dict:
    """An evaluation's figures over the demo's one-hop questions alone (its records name each
    question; qa.jsonl says how many hops it takes)."""
    from studio.demo import QA
    from studio.method.rollouts import answer_metrics
    from studio.services.evaluation_files import evaluation_records_path

    one_hop = {row["id"] for row in map(json.loads, QA.read_text().splitlines())
               if row["hops"] == 1}
    records = [json.loads(line) for line in evaluation_records_path(
        settings, evaluation_id).read_text().splitlines()]
    return answer_metrics([r for r in records if r["id"] in one_hop])


def label_counts(metrics: dict, tools: Sequence[str]) -> str:
    """An evaluation's questions per failure label, in its tools' words ("correct 21 · wrong
    expression 30"), the labels no question got left out; "–" without labels."""
    from studio.method.failures import label_set
    from studio.method.tools import named_specs

    counts = metrics.get("labels") or {}
    return " · ".join(f"{label.title} {counts[label.key]}"
                      for label in label_set(named_specs(tools)) if counts.get(label.key)) or "–"


def print_table(results: dict[str, dict], tools: Sequence[str] = ("search",)) -> None:
    """One row per arm: tool use, scores, and where the answers went (the failure labels of
    the evaluation's `tools`)."""
    print("| model | valid-call rate | answer rate | EM | SubEM | F1 | tool calls | tool errors "
          "| labels |")
    print("|---|---|---|---|---|---|---|---|---|")
    labels = {"base": "base (no training)",
              "curriculum": "trained, exemplar curriculum",
              "mixed": "trained, exemplar curriculum, mixed guidance",
              "exemplar-free": "trained, exemplar-free"}
    for arm, m in results.items():
        print(f"| {labels[arm]} | {m['valid_search_rate']:.2f} | {m['answer_rate']:.2f} | "
              f"{m['em']:.3f} | {m['subem']:.3f} | {m['f1']:.3f} | {m['search_calls']:.2f} | "
              f"{m.get('code_errors', '–')} | {label_counts(m, tools)} |")
    print()


def save_model(settings, run_id: int) -> Path:
    """The run's final checkpoint as a plain Hugging Face folder (an export, merged)."""
    from studio.services import exports
    from worker.export import run_export

    export = exports.create_export(settings, admin(settings), run_id, target="folder", start=False)
    return settings.resolved_data_dir / run_export(settings, export["id"])["location"]


def plot_png(curves: dict[str, list[dict]], path: Path) -> None:
    """Valid-search rate and reward per training step, one colour per arm, with each step's
    exemplar count beneath."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 1]})
    for arm, rows in curves.items():
        steps = [r["step"] + 1 for r in rows]
        line = top.plot(steps, [r["valid_search_rate"] for r in rows], marker="o",
                        markersize=3, label=f"{arm}: valid-search rate")[0]
        top.plot(steps, [r["reward_mean"] for r in rows], linestyle=":",
                 color=line.get_color(), label=f"{arm}: reward mean")
        bottom.step(steps, [r["exemplars"] for r in rows], where="mid",
                    color=line.get_color(), label=arm)
    top.set_ylabel("training rollouts")
    top.set_ylim(-0.02, 1.02)
    top.set_title("Training: exemplar curriculum against exemplar-free RL")
    top.legend(fontsize=8)
    bottom.set_ylabel("exemplars")
    bottom.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_html(curves: dict[str, list[dict]], path: Path) -> None:
    import plotly.graph_objects as go

    figure = go.Figure()
    for arm, rows in curves.items():
        steps = [r["step"] + 1 for r in rows]
        for key in CURVES:
            figure.add_scatter(x=steps, y=[r.get(key) for r in rows], name=f"{arm}: {key}",
                               mode="lines+markers")
    figure.update_layout(title="Training curves", xaxis_title="step")
    figure.write_html(path, include_plotlyjs=True)


def build_parser() -> argparse.ArgumentParser:
    """The bench's flags (the tests parse with it, so a new flag reaches them too)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", help="exemplars x steps per stage, e.g. 3x10,2x8,0x12")
    parser.add_argument("--lr", type=float)
    parser.add_argument("--batch", type=int, help="questions per step")
    parser.add_argument("--group", type=int, help="samples per question")
    parser.add_argument("--turn-tokens", type=int, dest="turn_tokens")
    parser.add_argument("--obs-tokens", type=int, dest="obs_tokens",
                        help="search results cut to this many tokens")
    parser.add_argument("--temperature", type=float, help="rollout sampling temperature")
    parser.add_argument("--kl", type=float, help="KL coefficient")
    parser.add_argument("--turns", type=int, help="tool calls per rollout (max_turns)")
    parser.add_argument("--response-tokens", type=int, dest="response_tokens",
                        help="tokens per response, the tools' included")
    parser.add_argument("--exemplars", type=Path, help="an exemplar file (.jsonl) to use instead "
                        "of the pack's, stored as the exemplar set 'bench-exemplars'")
    parser.add_argument("--format-weight", type=float, dest="format_weight",
                        help="the reward's format weight (method.md: 0.2; 0 rewards accuracy only)")
    parser.add_argument("--share", type=float, default=0.5,
                        help="mixed arm: the share of each group sampled with the exemplars")
    parser.add_argument("--shaping", choices=("none", "luffy"), default="none",
                        help="mixed arm: how the hinted rollouts' tokens are weighted")
    parser.add_argument("--gamma", type=float, default=0.1, help="mixed arm: luffy's gamma")
    parser.add_argument("--when", choices=("always", "all-failed"), default="always",
                        help="mixed arm: hint every question, or only those whose unhinted "
                        "rollouts all failed")
    parser.add_argument("--call-bonus", type=float, dest="call_bonus",
                        help="reward.call_bonus of the trained arms (default: off)")
    parser.add_argument("--layout", choices=("chat", "inline"),
                        help="exemplars as chat turns or inline in one message (the paper's)")
    parser.add_argument("--exemplar-selection", choices=("first", "sample", "similar"),
                        help="which exemplars a prompt shows: the set's first k, k drawn at "
                        "random, or the k most like the question (default: the preset's)")
    parser.add_argument("--top-k", type=int, dest="top_k",
                        help="passages a search returns, in training and in the evaluation")
    parser.add_argument("--lora-rank", type=int, help="0: full fine-tuning")
    parser.add_argument("--dtype", choices=("float32", "bfloat16-autocast"),
                        help="the runs' engine.dtype (default: the preset's, float32 on a CPU)")
    parser.add_argument("--model", help="default: the preset's (the bundled SmolLM2)")
    parser.add_argument("--preset", default="quick-start", choices=tuple(PRESET_PACKS),
                        help="the ready-made run the arms start from (studio.services.presets; "
                        "default quick-start); its stored results come from --preset NAME "
                        "--arms base,curriculum --out studio/demo/measured/NAME/seedN")
    parser.add_argument("--machine", default="2 CPU cores, nothing else running",
                        help="what the runs shared the machine with, kept with the results (a "
                        "preset's words quote it beside the minutes)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arms", default=",".join(DEFAULT_ARMS),
                        help=f"which arms to run, comma-separated, of {', '.join(ARMS)} "
                        f"(default: {','.join(DEFAULT_ARMS)}); "
                        "a seed sweep of the curriculum alone: --arms curriculum")
    parser.add_argument("--pack", choices=PACKS,
                        help="default: the preset's own (quick-start: demo, search-tour: span, "
                        "calculator: calc). demo: search on the demo world; span: search, on "
                        "its short-span "
                        "questions; math: python on the math pack; calc: the calculator on the "
                        "arithmetic pack")
    parser.add_argument("--soft", type=float, metavar="START",
                        help="a soft curriculum: this share of questions zero-shot at step 0, "
                        "rising to all by the last stage")
    parser.add_argument("--limit", type=int, help="evaluate on the first N held-out questions")
    parser.add_argument("--cross-search", action="store_true", dest="cross_search",
                        help="also evaluate every model on the search demo's held-out questions "
                        "with the search tool (does a tool habit carry to another tool?)")
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/icrl-effect"))
    parser.add_argument("--out", type=Path, help="default: DATA_DIR/icrl_effect")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny random model, 2 steps: checks the script")
    parser.add_argument("--evaluate-only", action="store_true", dest="evaluate_only",
                        help="evaluate the arms an earlier call with the same flags trained "
                        "in --data-dir (its evaluation failed or was stopped), without "
                        "training them again")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.child:
        return run_child(args)
    args.pack = pack_of(args)
    asked = args.arms.split(",")
    if set(asked) - set(ARMS):
        parser.error(f"--arms: a comma-separated choice of {', '.join(ARMS)}")
    arms = [arm for arm in ARMS if arm in asked]

    from studio.services import demo, evaluations, runs
    from studio.services.presets import preset_config
    from studio.settings import Settings
    from studio.storage import db

    if args.quick:
        from tests.support.tiny_model import build_tiny_model

        args.model = str(build_tiny_model(args.data_dir / "models" / "tiny"))
        args.stages, args.batch, args.group, args.turn_tokens = "1x1,0x1", 2, 2, 8
        args.limit = args.limit or 4
    out = args.out or args.data_dir / "icrl_effect"
    settings = Settings(data_dir=args.data_dir)
    settings.resolved_data_dir.mkdir(parents=True, exist_ok=True)
    db.upgrade(settings.sqlalchemy_url)
    if args.pack in TOOL_PACKS:
        {"math": demo.load_math_pack, "calc": demo.load_calc_pack}[args.pack](
            settings, admin(settings))
        heldout, corpus = TOOL_PACKS[args.pack][2], None
    else:
        demo.load_demo_pack(settings, admin(settings), index_now=True)
        heldout = demo.SPAN_HELDOUT_NAME if args.pack == "span" else demo.HELDOUT_NAME
        corpus = demo.DEMO_NAME
    logs = args.data_dir / "logs"
    logs.mkdir(exist_ok=True)

    if args.exemplars:
        from studio.services import exemplar_sets

        with open(args.exemplars, "rb") as stream:
            exemplar_sets.upload_exemplar_set(settings, admin(settings), stream,
                                              args.exemplars.name, EXEMPLAR_SET)
    t0 = time.time()
    configs = arm_configs(args, settings)
    if args.evaluate_only:
        created, train_minutes = trained_arms(settings, configs, arms)
        t0 -= train_minutes * 60
    else:
        created = {arm: runs.create_run(settings, admin(settings), config, start=False)
                   for arm, config in configs.items() if arm in arms}
        with ThreadPoolExecutor(2) as pool:  # the trained arms side by side
            list(pool.map(lambda arm: child(["--child", "train", str(created[arm]["id"])],
                                            args.data_dir, logs / f"train-{arm}.log"), created))
        train_minutes = (time.time() - t0) / 60

    from studio.run_config import RunConfig

    protocol = evaluations.with_run_tools(  # the base model calls the runs' tools too
        evaluations.run_protocol(RunConfig.model_validate(configs["curriculum"])),
        configs["curriculum"])
    targets = {**({"base": {"model": configs["curriculum"]["model"]}} if "base" in arms else {}),
               **{arm: {"run_id": run["id"]} for arm, run in created.items()}}
    heldout_ids = queue_evaluations(settings, args, targets, heldout, corpus, protocol)
    search_ids = {}
    if args.cross_search:  # does a tool habit carry to another tool? The search demo, zero-shot
        demo.load_demo_pack(settings, admin(settings), index_now=True)
        search_protocol = {**evaluations.run_protocol(RunConfig.model_validate(
            preset_config(SEARCH_PRESET, settings))), "tools": ["search"]}
        search_ids = queue_evaluations(settings, args, targets, demo.HELDOUT_NAME,
                                       demo.DEMO_NAME, search_protocol)
    run_evaluations(args.data_dir, [*heldout_ids.values(), *search_ids.values()])
    results = evaluation_metrics(settings, heldout_ids)
    searched = evaluation_metrics(settings, search_ids) or None
    one_hop = {arm: one_hop_metrics(settings, ident)
               for arm, ident in search_ids.items()} or None
    curves = {arm: runs.run_metrics(settings, run["id"]) for arm, run in created.items()}
    folders = {arm: save_model(settings, run["id"]) for arm, run in created.items()}
    minutes = (time.time() - t0) / 60

    grpo = configs["curriculum"]["grpo"]
    stages = " -> ".join(f"{s['exemplars']} ({s['steps']} steps)"
                         for s in configs["curriculum"]["curriculum"]["stages"])
    questions = next(iter(results.values()))["questions"]
    print(f"# ICRL effect: {configs['curriculum']['model']}, curriculum {stages}, "
          f"{grpo['batch_size']} questions x {grpo['group_size']} samples per step, "
          f"lr {grpo['lr']}, LoRA {configs['curriculum'].get('lora') or 'off'}, "
          f"{configs['curriculum']['engine'].get('dtype', 'auto')}, seed "
          f"{args.seed}; zero-shot on {questions} held-out {args.pack} questions "
          f"(training {train_minutes:.0f} min: {' beside '.join(created)}; {minutes:.0f} min "
          "in all)\n")
    for arm, rows in curves.items():  # what a step cost (engine.dtype changes it)
        print(f"{arm}: median seconds per step " + ", ".join(
            f"{part} {statistics.median(r[f'time_{part}'] for r in rows):.1f}"
            for part in ("step", "rollout", "reference", "update"))
            + f"; median response {statistics.median(r['response_length'] for r in rows):.0f}"
            " tokens\n")
    print_table(results, (protocol or {}).get("tools", ("search",)))
    if searched:
        print(f"The same models, zero-shot on {next(iter(searched.values()))['questions']} "
              "held-out questions of the search demo, with the search tool:\n")
        print_table(searched)
        print(f"Of them, the {next(iter(one_hop.values()))['questions']} one-hop questions:\n")
        print_table(one_hop)
    for arm, folder in folders.items():
        print(f"{arm} model: {folder}")

    out.parent.mkdir(parents=True, exist_ok=True)
    plot_png(curves, out.with_suffix(".png"))
    plot_html(curves, out.with_suffix(".html"))
    out.with_suffix(".json").write_text(json.dumps(
        {"args": {k: str(v) for k, v in vars(args).items()}, "held_out": heldout,
         "command": " ".join(["bench/icrl_effect.py", *(argv or sys.argv[1:])]),
         "date": time.strftime("%Y-%m-%d"), "machine": args.machine, "configs": configs,
         "results": results, "search_results": searched,
         "search_one_hop_results": one_hop, "curves": curves,
         "models": {k: str(v) for k, v in folders.items()},
         "minutes": {"training": train_minutes, "all": minutes}}, indent=1))
    print(f"curves: {out.with_suffix('.png')}, {out.with_suffix('.html')}; all: "
          f"{out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
