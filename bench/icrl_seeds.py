"""Seeds of `bench/icrl_effect.py` side by side: one table per evaluation, one chart.

    .venv/bin/python bench/icrl_seeds.py OUT_seed0.json OUT_seed1.json OUT_seed2.json \
        --out docs/img/calc_seeds.png

Each file is what one `icrl_effect.py` run wrote (`OUT.json`). A result on one seed is an
anecdote; this prints, per arm and seed, the zero-shot evaluation (and the search demo's,
where the runs were made with `--cross-search`, and its one-hop questions apart), the arm's
mean over seeds, and the training per curriculum stage; and draws every seed's training
curves (tool-call rate and accuracy per step, a thin line each, the mean over seeds thick)
in one PNG.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from itertools import groupby
from pathlib import Path

COLUMNS = (("valid-call rate", "valid_search_rate"), ("answer rate", "answer_rate"),
           ("EM", "em"), ("tool calls", "search_calls"))
TRAINING = (("valid-call rate", "valid_search_rate"), ("answer rate", "answer_rate"),
            ("accuracy", "acc"), ("KL", "kl"))
PANELS = (("valid_search_rate", "valid tool-call rate"), ("acc", "accuracy"))


def load(paths: list[Path]) -> list[dict]:
    """The runs, each with its seed, ordered by seed."""
    runs = []
    for path in paths:
        try:
            run = json.loads(path.read_text())
            run["seed"] = int(run["args"]["seed"])
        except (OSError, ValueError, KeyError) as error:
            raise SystemExit(f"{path}: not an icrl_effect.py result ({error})") from None
        runs.append(run)
    return sorted(runs, key=lambda run: run["seed"])


def evaluation_table(runs: list[dict], key: str) -> None:
    """Per arm, each seed's row and the mean over seeds."""
    print("| model | seed | " + " | ".join(name for name, _ in COLUMNS) + " |")
    print("|---|---|" + "---|" * len(COLUMNS))
    for arm in arms(runs, key):
        rows = [(run["seed"], run[key][arm]) for run in runs if arm in (run[key] or {})]
        for seed, metrics in rows:
            print(f"| {arm} | {seed} | " + " | ".join(
                f"{metrics[field]:.2f}" for _, field in COLUMNS) + " |")
        print(f"| **{arm}, mean** | {len(rows)} seeds | " + " | ".join(
            f"**{statistics.fmean(m[field] for _, m in rows):.2f}**" for _, field in COLUMNS)
            + " |")
    print()


def stages(curve: list[dict]) -> list[tuple[int, int, int, list[dict]]]:
    """A run's steps cut where the exemplar count changes: (first, last, k, rows)."""
    cut = [list(rows) for _, rows in groupby(curve, key=lambda row: row["exemplars"])]
    return [(rows[0]["step"] + 1, rows[-1]["step"] + 1, rows[0]["exemplars"], rows)
            for rows in cut]


def arms(runs: list[dict], key: str) -> list[str]:
    """The arms in `key` ("results", "search_results", "search_one_hop_results", "curves") of
    any run, in order."""
    return list(dict.fromkeys(arm for run in runs for arm in run[key] or {}))


def training_table(runs: list[dict]) -> None:
    """Per arm, seed and curriculum stage: the mean of each training metric."""
    print("| arm | seed | steps | exemplars | " + " | ".join(n for n, _ in TRAINING) + " |")
    print("|---|---|---|---|" + "---|" * len(TRAINING))
    for arm in arms(runs, "curves"):
        for run in runs:
            for first, last, k, rows in stages(run["curves"].get(arm, [])):
                means = [statistics.fmean(r.get(field) or 0.0 for r in rows)
                         for _, field in TRAINING]
                print(f"| {arm} | {run['seed']} | {first}-{last} | {k} | "
                      + " | ".join(f"{m:.2f}" for m in means) + " |")
    print()


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(8, 7.5), sharex=True,
                             gridspec_kw={"height_ratios": [3, 3, 1]})
    trained = arms(runs, "curves")
    colours = dict(zip(trained, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))
    for arm in trained:
        curves = [run["curves"][arm] for run in runs if arm in run["curves"]]
        for axis, (field, label) in zip(axes[:2], PANELS, strict=True):
            for curve in curves:
                axis.plot([r["step"] + 1 for r in curve], [r.get(field) or 0 for r in curve],
                          color=colours[arm], alpha=0.3, linewidth=1)
            length = min(len(curve) for curve in curves)
            axis.plot(range(1, length + 1),
                      [statistics.fmean(c[i].get(field) or 0 for c in curves)
                       for i in range(length)],
                      color=colours[arm], linewidth=2.2,
                      label=f"{arm}: mean of {len(curves)} seeds")
            axis.set_ylabel(label)
            axis.set_ylim(-0.02, 1.02)
        axes[2].step([r["step"] + 1 for r in curves[0]], [r["exemplars"] for r in curves[0]],
                     where="mid", color=colours[arm], label=arm)
    axes[0].set_title("Training rollouts, every seed (thin) and their mean (thick)")
    axes[0].legend(fontsize=8)
    axes[2].set_ylabel("exemplars")
    axes[2].set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path, help="icrl_effect.py's OUT.json files")
    parser.add_argument("--out", type=Path, help="the chart (PNG); none when not given")
    args = parser.parse_args(argv)
    runs = load(args.results)
    print(f"# {len(runs)} seeds ({', '.join(str(run['seed']) for run in runs)}), zero-shot "
          f"on {next(iter(runs[0]['results'].values()))['questions']} held-out "
          f"{runs[0]['args']['pack']} questions\n")
    evaluation_table(runs, "results")
    if any(run.get("search_results") for run in runs):
        print("The same models on the search demo's held-out questions, with the search "
              "tool:\n")
        evaluation_table(runs, "search_results")
    if any(run.get("search_one_hop_results") for run in runs):
        print("Of them, the one-hop questions:\n")
        evaluation_table(runs, "search_one_hop_results")
    print("Training, per curriculum stage (means over the stage's steps):\n")
    training_table(runs)
    if args.out:
        plot(runs, args.out)
        print(f"chart: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
