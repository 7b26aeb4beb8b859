"""The GPU benchmark also runs on CPU with a small shape, so CI checks that it works."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from tests.support.shared_data import needs_shared

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_throughput_runs_on_cpu_with_a_small_shape(tmp_path, capsys):
    """The small shape with a tiny model's vocabulary: the bundled one's would be converted
    first, and the speed of a random model does not depend on which words its ids spell."""
    from tests.support.tiny_model import build_tiny_model

    bench = _load("gpu_throughput")
    assert bench.main(["--device", "cpu", "--shape", "small", "--batch", "2", "--tokens", "8",
                       "--repeats", "1", "--prompt-tokens", "32",
                       "--tokenizer", str(build_tiny_model(tmp_path / "tiny")),
                       "--data-dir", str(tmp_path / "data")]) == 0
    table = capsys.readouterr().out
    row = [line for line in table.splitlines() if line.startswith("| 2 |")]
    assert len(row) == 1
    cells = [c.strip() for c in row[0].strip("|").split("|")]
    assert float(cells[1]) > 0 and float(cells[2]) > 0 and float(cells[7]) > 0


def test_the_export_benchmark_runs_on_a_tiny_model(tmp_path, capsys):
    from tests.support.tiny_model import build_tiny_model

    bench = _load("export")
    model = build_tiny_model(tmp_path / "tiny")
    assert bench.main(["--model", str(model), "--repeats", "1",
                       "--data-dir", str(tmp_path / "data")]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert [r.split("|")[1].strip() for r in rows[1:]] == [
        "folder, hard links", "folder, copies", "zip (weights stored, text deflated)",
        "hub push (local Hub, LFS)"]
    assert all(float(r.split("|")[2]) > 0 for r in rows[1:])


def test_stream_benchmark_smoke_mode_loses_nothing(capsys):
    """4 clients join a run with history for 4 s (half reconnect), 2,000 stored rollouts, on
    SQLite and PostgreSQL."""
    bench = _load("streams")
    assert bench.main(["--smoke"]) == 0
    table = capsys.readouterr().out
    databases = ("| sqlite | ", "| postgresql | ")
    live = [line for line in table.splitlines()
            if line.startswith(databases) and line.count("|") == 11]
    assert len(live) == 2, table
    for line in live:
        cells = [c.strip() for c in line.strip("|").split("|")]
        history, rows, events = (int(c.replace(",", "")) for c in cells[1:4])
        assert history == 50 + 10 + 1, "50 steps: metrics, a rollout every fifth, one stage"
        assert rows >= 15, "about 10 rows a second were written"
        assert events >= 4 * (history + rows), "each client received every row"
        assert cells[8:] == ["0", "0"], "no row lost, none twice"
    opening = [line for line in table.splitlines()
               if line.startswith(databases) and line.count("|") == 6]
    assert len(opening) == 8 and all(float(line.split("|")[4]) > 0 for line in opening)
    pages = [line for line in table.splitlines()
             if line.startswith(databases) and line.count("|") == 7]
    assert len(pages) == 18 and all(float(line.split("|")[4]) > 0 for line in pages)


@pytest.mark.parametrize("pack", ["demo", "calc", "span"])
def test_the_icrl_effect_benchmark_runs_its_three_arms_on_a_tiny_model(tmp_path, capsys, pack):
    """Both trained arms side by side in their own processes, three zero-shot evaluations on
    held-out questions, the curves, and each trained arm's model as a plain HF folder; with
    the calculator pack the runs and the base model's evaluation call the calculator, with
    no corpus, and `--cross-search` evaluates the same models on the search demo too (and
    its one-hop questions apart); the span pack searches, trained on the short-span
    questions. The seeds' summary reads what the run wrote."""
    bench = _load("icrl_effect")
    extra = ["--cross-search"] if pack != "demo" else []
    assert bench.main(["--quick", "--pack", pack, "--data-dir", str(tmp_path / "data"),
                       *extra]) == 0
    out = capsys.readouterr().out
    tables = [[line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
              for table in out.split("\n\n") if table.startswith("| model")]
    assert len(tables) == (1 if pack == "demo" else 3)
    for rows in tables:
        assert [r.split("|")[1].strip() for r in rows[1:]] == [
            "base (no training)", "trained, exemplar curriculum", "trained, exemplar-free"]
    assert f"zero-shot on 4 held-out {pack} questions" in out
    code_errors = [r.split("|")[8].strip() for r in tables[0][1:]]
    assert code_errors == (["0"] * 3 if pack == "calc" else ["–"] * 3)
    for arm in ("curriculum", "exemplar-free"):
        (line,) = [x for x in out.splitlines() if x.startswith(f"{arm} model: ")]
        folder = Path(line.split(": ", 1)[1])
        assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()
    assert (tmp_path / "data" / "icrl_effect.png").read_bytes()[:4] == b"\x89PNG"

    result = tmp_path / "data" / "icrl_effect.json"
    chart = tmp_path / "seeds.png"
    assert _load("icrl_seeds").main([str(result), str(result), "--out", str(chart)]) == 0
    summary = capsys.readouterr().out
    means = [line for line in summary.splitlines() if ", mean** | 2 seeds" in line]
    assert len(means) == 3 * len(tables), "a mean row per arm and evaluation"
    training = summary.split("Training, per curriculum stage")[1]
    stage_rows = [line for line in training.splitlines() if line.startswith("| curriculum | 0 |")]
    assert [row.split("|")[3:5] for row in stage_rows] == [[" 1-1 ", " 1 "], [" 2-2 ", " 0 "]] * 2
    assert chart.read_bytes()[:4] == b"\x89PNG"


def test_the_icrl_effect_benchmarks_one_hop_figures_keep_the_one_hop_questions(tmp_path):
    """The target of issue 31 is on one-hop questions: the two-hop ones of an evaluation are
    left out of these figures."""
    from studio.demo import QA
    from studio.services.evaluation_files import evaluation_records_path
    from studio.settings import Settings

    settings = Settings(data_dir=tmp_path)
    rows = [json.loads(line) for line in QA.read_text().splitlines()]
    one_hop = next(r["id"] for r in rows if r["hops"] == 1)
    two_hop = next(r["id"] for r in rows if r["hops"] == 2)
    records = [{"id": one_hop, "em": 1.0, "subem": 1.0, "f1": 1.0, "acc": 1.0, "format": 1.0,
                "prediction": "x", "search_calls": 2},
               {"id": two_hop, "em": 0.0, "subem": 0.0, "f1": 0.0, "acc": 0.0, "format": 0.0,
                "prediction": None, "search_calls": 0}]
    path = evaluation_records_path(settings, 7)
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert _load("icrl_effect").one_hop_metrics(settings, 7) == {
        "em": 1.0, "subem": 1.0, "f1": 1.0, "acc": 1.0, "format": 1.0, "search_calls": 2.0,
        "valid_search_rate": 1.0, "answer_rate": 1.0, "questions": 1}


def test_the_icrl_effect_benchmark_runs_only_the_arms_asked_for(tmp_path, capsys):
    """A seed sweep trains and evaluates the curriculum alone; an unknown arm is refused."""
    bench = _load("icrl_effect")
    assert bench.main(["--quick", "--arms", "curriculum", "--seed", "3",
                       "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    assert [r.split("|")[1].strip() for r in rows[1:]] == ["trained, exemplar curriculum"]
    assert "seed 3;" in out and "min: curriculum;" in out
    assert [x.split(": ")[0] for x in out.splitlines() if " model: " in x] == ["curriculum model"]
    with pytest.raises(SystemExit):
        bench.main(["--quick", "--arms", "curriculum,teacher", "--data-dir", str(tmp_path)])


def test_the_sandbox_benchmark_compares_a_sandboxed_call_with_a_plain_one(capsys):
    assert _load("sandbox").main(["--repeats", "2"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert [r.split("|")[1].strip() for r in rows[1:]] == [
        "plain python -c", "sandboxed", "sandboxed, batch of 8"]
    assert all(float(r.split("|")[2]) > 0 for r in rows[1:])


def test_the_grpo_options_benchmark_trains_each_family_it_is_given(tmp_path, capsys):
    """Two families that change the most (DAPO resamples and shapes the reward; GSPO takes
    sequence ratios), two steps each on a tiny random model: one row each, every step."""
    bench = _load("grpo_options")
    assert bench.main(["--quick", "--family", "DAPO", "--family", "GSPO",
                       "--data-dir", str(tmp_path)]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines()
            if line.startswith(("| DAPO |", "| GSPO |"))]
    assert len(rows) == 2
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[2] == "2" and float(cells[-1]) > 0


def test_the_reader_ceiling_benchmark_asks_each_question_three_ways(tmp_path, capsys):
    """4 held-out questions, 0 and 2 exemplars, three pre-filled replies each: one row per
    condition and hop count, one answer per question, condition and exemplar count."""
    bench = _load("reader_ceiling")
    out = tmp_path / "answers.jsonl"
    assert bench.main(["--quick", "--data-dir", str(tmp_path), "--out", str(out)]) == 0
    rows = [[c.strip() for c in line.strip("|").split("|")]
            for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    totals = [(r[0], r[1]) for r in rows[1:] if r[2] == "all"]
    assert totals == [(k, c) for k in ("0", "2") for c in bench.CONDITIONS]
    assert all(r[3] == "4" for r in rows[1:] if r[2] == "all")
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 4 * 3 * 2
    assert all(r["em"] in (0, 1) and 0 <= r["f1"] <= 1 for r in records)
    assert not any(r["reachable"] for r in records if r["condition"] == "closed book")


def test_the_reader_ceilings_replies_carry_the_search_the_question_would_make(tmp_path):
    """The BM25 reply holds the top 3 passages for the question, in order; the support reply
    holds the passages with the golden answer, found for every held-out question (as whole
    words, the last one before the closing tag too); both end at `<answer>`."""
    from transformers import AutoTokenizer

    from studio import demo
    from studio.method.failures import retrieved_texts
    from studio.method.protocol import Limits
    from studio.retrieval.index import build_index
    from studio.retrieval.passages import Passage
    from tests.support.tiny_model import build_tiny_model

    bench = _load("reader_ceiling")
    passages = {p["id"]: p for p in bench.read_jsonl(demo.CORPUS)}
    index = build_index(Passage(p["id"], p["title"], p["text"]) for p in passages.values())
    tokenizer = AutoTokenizer.from_pretrained(build_tiny_model(tmp_path / "tiny"))
    heldout = [r for r in bench.read_jsonl(demo.QA) if r["split"] == "heldout"]
    for row in heldout:
        top = [h.passage for h in index.search([row["question"]], 3)[0]]
        support = [(passages[i]["title"], passages[i]["text"]) for i in row["support"]]
        replies = bench.reply_prefixes(
            row["question"], support,
            lambda queries, top=top: [[(p.title, p.text) for p in top] for _ in queries],
            tokenizer, Limits(max_obs_tokens=5000, max_response_tokens=6000))
        assert replies["closed book"] == "<answer>"
        for condition in ("BM25 top 3", "support passages"):
            reply = replies[condition]
            assert reply.startswith(f"<search> {row['question']} </search>\n\n<information>")
            assert reply.endswith("</information>\n\n<answer>")
        (bm25,) = retrieved_texts(replies["BM25 top 3"])
        found = [bm25.index(f"Doc {n}(Title: {p.title}) ") for n, p in enumerate(top, 1)]
        assert found == sorted(found) and found[0] == 0
        assert bench.holds_answer(replies["support passages"], row["golden_answers"]), row["id"]
        assert not bench.holds_answer(replies["closed book"], row["golden_answers"])


def test_the_icrl_effect_benchmarks_top_k_reaches_both_arms_and_the_evaluation(tmp_path):
    """`--top-k 1`: every trained arm searches for one passage, and so does the zero-shot
    evaluation the bench builds from the curriculum arm's config."""
    from studio.run_config import RunConfig
    from studio.services.evaluations import run_protocol
    from studio.settings import Settings

    bench = _load("icrl_effect")
    args = bench.build_parser().parse_args(["--top-k", "1", "--seed", "1"])
    configs = bench.arm_configs(args, Settings(data_dir=tmp_path))
    assert {arm: c["grpo"]["top_k"] for arm, c in configs.items()} == {
        "curriculum": 1, "mixed": 1, "exemplar-free": 1}
    assert run_protocol(RunConfig.model_validate(configs["curriculum"]))["top_k"] == 1


def test_the_icrl_effect_benchmarks_arms_differ_from_their_preset_only_in_what_they_name(
        tmp_path):
    """`--preset NAME`: the curriculum arm is the preset's run (so its stored results count
    for the preset, studio.services.presets.measured_runs); the mixed arm is the same run
    with the mixed guidance the flags set; the exemplar-free arm shows no exemplar."""
    from studio.services import presets
    from studio.settings import Settings

    bench = _load("icrl_effect")
    settings = Settings(data_dir=tmp_path)
    for name in presets.RUN_PRESETS:
        args = bench.build_parser().parse_args(["--preset", name, "--seed", "2",
                                                "--shaping", "luffy"])
        configs = bench.arm_configs(args, settings)
        assert presets.same_run(configs["curriculum"], presets.RUN_PRESETS[name]), name
        assert configs["curriculum"]["seed"] == 2
        assert configs["mixed"]["guidance"] == {"mode": "mixed", "share": 0.5,
                                                "shaping": "luffy", "gamma": 0.1,
                                                "when": "always"}
        assert {s["exemplars"] for s in configs["exemplar-free"]["curriculum"]["stages"]} == {0}
    calc = bench.arm_configs(bench.build_parser().parse_args(["--pack", "calc", "--lr", "1e-3"]),
                             settings)
    assert not presets.same_run(calc["curriculum"], presets.RUN_PRESETS[presets.CALCULATOR])


@pytest.mark.parametrize("pack", ["demo", "calc"])
def test_the_exemplar_cost_benchmark_times_each_arm_on_a_tiny_model(tmp_path, capsys, pack):
    """It stopped running when prompts began to name their tools (issue 34). Each arm's
    phases, its step against the zero-shot one, and the levers' ratios under the table."""
    bench = _load("exemplar_cost")
    assert bench.main(["--quick", "--data-dir", str(tmp_path), "--pack", pack]) == 0
    out = capsys.readouterr().out
    rows = [[c.strip() for c in line.strip("|").split("|")]
            for line in out.splitlines() if line.startswith("| ")]
    assert [r[0] for r in rows[1:]] == list(bench.ARMS)
    tokens = {r[0]: int(r[1]) for r in rows[1:]}
    assert tokens["zero-shot"] < tokens["mixed"] < tokens["first"] == tokens["per-step"], (
        "3 exemplars make the prompts longer; a mixed step shows them to half its rollouts")
    assert rows[1][-1] == "1.00x", "each arm's step is set against the zero-shot step"
    for row in rows[1:]:  # a fast machine times a tiny step at 0.00 s; any duration will do
        assert all(float(cell) >= 0 for cell in row[3:8]) and re.fullmatch(r"\d+\.\d\dx", row[8])
    ratios = [line for line in out.splitlines() if line.startswith("- ")]
    assert [line.split(":")[0] for line in ratios] == [
        f"- {arm} / {against}" for arm, against in bench.RATIOS]
    with pytest.raises(SystemExit):
        bench.main(["--arms", "zero-shot,every"])


@pytest.mark.parametrize(("batches", "said"), [
    ("1", "[1] is not a positive multiple of --group 2"),
    ("8,3", "[3] is not a positive multiple of --group 2"),
    ("x", "'x' is not comma-separated whole numbers")])
def test_the_rollout_benchmark_refuses_a_shape_it_cannot_fill(capsys, batches, said):
    """`--batches 1 --group 2` ended in `max() arg is an empty sequence` (issue 34)."""
    with pytest.raises(SystemExit) as stopped:
        _load("rollout").main(["--batches", batches, "--group", "2"])
    assert stopped.value.code == 2 and said in capsys.readouterr().err


def test_the_grpo_step_benchmark_times_a_native_step_per_precision_and_its_floor(tmp_path,
                                                                                  capsys):
    """Its quick mode on a tiny model, float32 beside bfloat16-autocast, each in a process of
    its own (TRL's side needs the bench extra, not in CI)."""
    from tests.support.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path / "tiny")
    assert _load("grpo_step").main(["--quick", "--only", "native", "--model", str(model),
                                    "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = {cells[0]: cells[1:] for cells in
            ([c.strip() for c in line.strip("|").split("|")]
             for line in out.splitlines() if line.startswith("| "))}
    assert rows["phase"] == ["native fp32", "native bf16-autocast",
                             "native bf16-autocast / native fp32"], "TRL's side was not run"
    fp32, bf16, ratio = rows["**whole step**"]
    assert float(fp32.split()[0]) > 0 and float(bf16.split()[0]) > 0 and ratio.endswith(")")
    floor = rows["floor: plain fwd + bwd, same tokens, full logits, no optimizer"]
    assert all("update / floor" in cell for cell in floor[:2])
    assert "bfloat16 against float32: max |diff|" in out


def _table_rows(out: str, header: str) -> list[list[str]]:
    """The rows of the markdown table under the line that starts with `header`."""
    lines = (header + out.split(header, 1)[1]).splitlines()
    table = [line for line in lines[:next((i for i, line in enumerate(lines)
                                            if not line.startswith("|")), len(lines))]]
    return [[c.strip() for c in line.strip("|").split("|")] for line in table[2:]]


def test_the_model_load_benchmark_converts_a_tiny_gguf_and_loads_it_again(tmp_path, capsys,
                                                                          monkeypatch):
    """Its quick mode puts a tiny GGUF on the shelf, converts it and loads it from the cache;
    a name that is not on the shelf is refused."""
    from studio.models import base_models

    # the tiny entry stays on this test's shelf, not on the other tests'
    monkeypatch.setattr(base_models, "PACKAGED_MODELS", dict(base_models.PACKAGED_MODELS))
    bench = _load("bench_model_load")
    assert bench.main(["--quick", "--keep", str(tmp_path / "data")]) == 0
    out = capsys.readouterr().out
    stages = _table_rows(out, "| stage of the first conversion")
    assert stages[-1][0] == "**total conversion**" and len(stages) >= 3
    assert any(row[0].startswith("Checking the converted") for row in stages), stages
    cached = {row[0]: float(row[1]) for row in _table_rows(out, "| cached (median of 1)")}
    assert set(cached) == {"resolve_model", "load_tokenizer + load_causal_lm"}
    assert (tmp_path / "data" / "models" / bench.QUICK_MODEL / "config.json").is_file()
    with pytest.raises(SystemExit):
        bench.main(["--model", "no-such-model", "--keep", str(tmp_path / "other")])
    assert "'no-such-model' is not one of" in capsys.readouterr().err


def test_the_uploads_benchmark_refuses_and_reads_each_format_at_small_limits(capsys):
    """Every format refused one row past the limit (at that row), read whole at the limit,
    one text file stored and indexed, one long record refused (bench/uploads.py, small)."""
    assert _load("uploads").main(["--rows", "200", "--accepted-rows", "200", "--text-mb", "1",
                                  "--record-mb", "2", "--record-limit-mb", "1"]) == 0
    out = capsys.readouterr().out
    refused = _table_rows(out, "| format | file MB | refused at")
    assert len(refused) == 7 and all(re.fullmatch(r"(line|row|item) \d+.*", r[2])
                                     for r in refused), refused
    accepted = _table_rows(out, "| format | read whole, s")
    assert [r[0] for r in accepted] == [r[0] for r in refused]
    texts = _table_rows(out, "| content | text MB")
    assert [r[0] for r in texts] == ["words", "one long word"]
    assert all(int(r[-1].replace(",", "")) > 0 for r in texts), "each file gave passages"
    records = _table_rows(out, "| record | refused at")
    assert len(records) == 6 and all(r[1] for r in records)


@needs_shared
def test_the_rollout_benchmark_times_a_small_batch_on_the_bundled_model(models_dir, capsys):
    """Its smallest shape: one batch of 2 short prompts, each variant run once."""
    _load("rollout").main(["--prompts", "short", "--batches", "2", "--group", "2", "--runs",
                           "1", "--max-turn-tokens", "8", "--max-response-tokens", "48",
                           "--data-dir", str(models_dir)])
    (row,) = _table_rows(capsys.readouterr().out, "| prompts | batch")
    assert row[:2] == ["short", "2"] and row[-1] == "1/1/1"
    assert float(row[6]) > 0 and float(row[7]) > 0, "tokens per second of both ways"


@needs_shared
def test_the_retrieval_benchmark_builds_queries_serves_and_scores_a_small_corpus():
    """Its smallest shape: 1,000 passages per backend, queries, /retrieve over HTTP, and
    recall on the real samples; both backends return the same top 3 (bench/retrieval.py, in
    a process of its own: its children are spawned and import it by name)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(BENCH / "retrieval.py"), "--sizes", "1k",
                           "--quick", "--rank-bm25-max", "1k"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    builds = _table_rows(out, "| passages | backend | build s")
    assert [r[:2] for r in builds] == [["1k", "bm25s"], ["1k", "rank-bm25"]]
    (speed,) = _table_rows(out, "| passages | bm25s ms/query")
    done, asked = speed[-1].split("/")
    assert speed[0] == "1k" and done == asked, "the backends agree on every top 3"
    (served,) = _table_rows(out, "| passages | p50 ms")
    assert served[3] == "100", "each /retrieve request was answered"
    quality = _table_rows(out, "| corpus | stemmer | backend")
    assert len(quality) == 8 and all(0 < float(r[3]) <= 1 for r in quality)


def test_the_first_run_benchmark_walks_from_sign_in_to_a_downloaded_model(tmp_path, capsys):
    """Its quick mode, issue 42's walk-through: the same walk in Chromium on a tiny model
    (launch a ready-made run, cancel it, launch it again to the end, evaluate, export a zip
    transformers loads) with no red error on the way and no script error in the browser
    (bench/first_run.py; what the tiny model answers means nothing). The one click trains
    and evaluates: base against trained, queued by the run's end, on all 60 of the ready-made
    run's held-out questions (the Data-to-Launch page tests stop at the launch)."""
    from ast import literal_eval

    assert _load("first_run").main(["--quick", "--keep", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    phases = _table_rows(out, "| phase | seconds")
    assert [row[0] for row in phases] == [
        "sign in", "launch the quick start and cancel it",
        "launch it again (stores its data pack)", "wait for the first step", "train to the end",
        "wait for base against trained (queued at the run's end)",
        "export a zip and download it", "**total**"]
    (evaluated,) = [line.removeprefix("Evaluate: ") for line in out.splitlines()
                    if line.startswith("Evaluate: ")]
    assert [row[:2] for row in literal_eval(evaluated)] == [["calc-heldout", "60"]]
    assert "the exported model answers: '" in out
    assert "console errors: 0" in out
    assert list(tmp_path.glob("*-step-*.zip")), "the zip was downloaded"


def test_the_estimate_check_sets_each_stage_against_its_measured_steps(tmp_path, capsys,
                                                                       monkeypatch):
    """bench/estimate_check.py on the recorded calibration, the studio's default model a tiny
    one: the Launch page's expected step of each stage beside the stored results' median
    step, then the run's, and a record the tests read."""
    from tests.support.tiny_model import build_tiny_model

    monkeypatch.setenv("STUDIO_DEFAULT_MODEL", str(build_tiny_model(tmp_path / "tiny")))
    recorded = Path(__file__).parent / "support" / "recorded" / "estimate_check_calculator.json"
    record = tmp_path / "record.json"
    assert _load("estimate_check").main(["--calibration", str(recorded), "--preset",
                                         "calculator", "--record", str(record)]) == 0
    rows = [[c.strip() for c in line.strip("|").split("|")]
            for line in capsys.readouterr().out.splitlines() if line.startswith("| calc")]
    assert [r[1].split(" (")[0] for r in rows] == ["3 exemplars", "2 exemplars", "1 exemplars",
                                                   "the run, per step"]
    for row in rows:
        assert float(row[2].split(" ")[0]) > 0 and float(row[5]) > 0
        assert row[6] == "2 CPU cores shared with two other runs and the test suite"
    written = json.loads(record.read_text())["presets"]["calculator"]
    assert len(written["stages"]) == len(written["typical"]) == len(written["measured"]) == 3
