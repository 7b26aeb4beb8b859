"""What the Home, Data, Exemplars, Curriculum, Launch and Team pages compute, without a
browser.

The browser tests drive the same functions through the pages; these pin the
edge cases (a refused edit, a round trip through YAML) in milliseconds.
"""

from __future__ import annotations

import json
import re

import gradio as gr
import pytest

from frontend import model_shelf
from frontend.components import error_markdown, ok_markdown, only_choice, picker, problems
from frontend.pages import curriculum, exemplars, home, launch, team
from studio.demo import CALC_EXEMPLARS, EXEMPLARS, MATH_EXEMPLARS
from studio.escaping import markdown_text
from studio.method.prompt import DEFAULT_INSTRUCTION, instruction_for
from studio.models import base_models
from studio.run_config import RunConfigError, config_field, parse_run_config
from studio.services import curricula, exemplar_sets, runs
from studio.services.errors import InvalidInput
from studio.services.health import NO_WORKER
from studio.services.prompt_preview import preview_exemplars, tools_written
from studio.storage.db import session_scope
from studio.storage.tables import Run
from tests.support.actors import admin, user
from tests.support.tiny_model import build_tiny_model

DEMO = [json.loads(line) for line in EXEMPLARS.read_text().splitlines()]


def test_home_status_without_a_worker_says_what_waits_and_what_to_start(settings):
    status = home.status_markdown(settings)
    assert status.startswith("**Status: degraded**")
    assert status.endswith(f"- ✗ {NO_WORKER}")


def test_problems_split_per_field_but_keep_one_message_whole():
    joined = ("data.corpus: 'x' does not exist; upload it first; "
              "curriculum.stages[0].exemplars: 3 exemplars, but the set holds only 2")
    assert problems(joined) == ["data.corpus: 'x' does not exist; upload it first",
                                "curriculum.stages[0].exemplars: 3 exemplars, but the set "
                                "holds only 2"]
    one = 'qa.jsonl line 2: field "question" is empty; write the question or remove the row'
    assert problems(one) == [one]
    assert "&lt;search&gt;" in error_markdown("unbalanced <search> tags")


def stage_counts(design: dict) -> list[int]:
    return [s["exemplars"] for s in design["stages"]]


def test_a_picker_with_one_choice_has_it_picked():
    assert only_choice([("demo (ready)", 1)]) == 1
    assert only_choice(["demo"]) == "demo"
    assert only_choice([]) is None and only_choice(["a", "b"]) is None
    assert picker([("demo", 1)]).constructor_args == {"choices": [("demo", 1)], "value": 1}
    # two choices: the update leaves the user's selection alone
    assert picker([("a", 1), ("b", 2)]).constructor_args == {"choices": [("a", 1), ("b", 2)]}


def test_stage_edits_add_remove_and_move_with_the_selection():
    design = curricula.preset_design("3-2-0", 100)
    added, selected = curriculum.add_stage(design, 2)
    assert stage_counts(added) == [3, 2, 2, 0] and selected == 3
    moved, selected = curriculum.move_stage(added, 3, +1)
    assert stage_counts(moved) == [3, 2, 0, 2] and selected == 4
    removed, selected = curriculum.remove_stage(moved, 4)
    assert stage_counts(removed) == [3, 2, 0] and selected == 3
    assert curriculum.set_stage(removed, 1, 4, 50)["stages"][0] == {"exemplars": 4, "steps": 50}
    assert curriculum.from_table(removed, [[1, 10], ["", ""], [0, 20.0]])["stages"] == [
        {"exemplars": 1, "steps": 10}, {"exemplars": 0, "steps": 20}]


def test_the_last_stage_cannot_be_removed_nor_moved_past_the_end():
    only = curricula.preset_design("0", 100)
    with pytest.warns(UserWarning, match="at least one stage"):
        assert curriculum.remove_stage(only, 1) == (curriculum.gr.skip(), curriculum.gr.skip())
    assert curriculum.move_stage(only, 1, +1) == (curriculum.gr.skip(), curriculum.gr.skip())


def test_adaptive_rule_is_set_and_cleared_on_the_same_stages():
    design = curricula.preset_design("3-2-0", 100)
    on = curriculum.set_adaptive(design, True, "valid_search_rate", "at_least", 0.8, 5, 10, 50)
    assert on["adaptive"] == {"metric": "valid_search_rate", "direction": "at_least",
                              "threshold": 0.8, "window": 5, "min_steps": 10, "max_steps": 50}
    assert on["stages"] == design["stages"]
    assert "averaged over its last 5 steps, is at least 0.8" in curriculum.render(on, 1)[2]
    assert curriculum.set_adaptive(on, False, *[None] * 6)["adaptive"] is None


def test_step_chart_follows_the_stages_and_notes_warn_on_steep_drops():
    best = curricula.preset_design("3-2-0", 100)
    table, figure, notes, *_ = curriculum.render(best, 1)
    assert table == [[3, 100], [2, 100], [0, 100]]
    line = figure.data[0]
    assert list(line.x) == [0, 100, 200, 300] and list(line.y) == [3, 2, 0, 0]
    assert line.line.shape == "hv"
    assert "No warning" in notes
    steep = curricula.preset_design("3-0", 100)
    assert "drops from 3 to 0 exemplars at once" in curriculum.render(steep, 1)[2]
    broken = {"stages": [{"exemplars": -1, "steps": 0}], "adaptive": None}
    assert "cannot be used" in curriculum.render(broken, 1)[2]


def test_adaptive_notes_count_the_steps_the_chart_shows():
    """3-step stages with the default rule (stages of 20 to 200 steps): the notes say the
    9 steps of the chart and that the run cannot get past stage 1, never "No warning"."""
    short = curricula.preset_design("3-2-0", 3)
    adaptive = curriculum.set_adaptive(short, True, "format", "at_least", 0.9, 10, 20, 200)
    _, figure, notes, *_ = curriculum.render(adaptive, 1)
    assert list(figure.data[0].x)[-1] == 9 and "9 steps in all" in notes
    assert "after 20 to 200 of its steps" in notes
    for said in ("In 9 steps the run never reaches stage 3 (0 exemplars)",
                 "no further than stage 1 (3 exemplars). Plan at least 41 steps"):
        assert markdown_text(said) in notes
    assert "No warning" not in notes
    window = curriculum.set_adaptive(short, True, "format", "at_least", 0.9, 30, 20, 200)
    assert "after 30 to 200 of its steps" in curriculum.render(window, 1)[2]  # a full window


def test_each_preset_says_what_it_is():
    notes = {name: curriculum.render(curricula.preset_design(name, 100), 1)[2]
             for name in curricula.PRESETS}
    assert markdown_text("The exemplar-free baseline") in notes["0"]
    assert "worked" not in notes["0"] and "best" not in notes["0"]
    assert "best schedule" in notes["3-2-0"]
    assert markdown_text("did worse than 3 -> 2 -> 0") in notes["3-0"]
    assert "clearly worse" in notes["3-2-1-0"]
    assert all("No warning from the paper" in notes[n] for n in ("3-2-0", "0"))
    assert "baseline" in curriculum.PRESET_LABELS["0"]


def test_draft_exemplar_replaces_its_stored_one_or_is_added():
    stored = [{"question": "a"}, {"question": "b"}]
    draft = {"question": "new"}
    assert exemplars.draft_set(stored, 2, draft) == [{"question": "a"}, draft]
    assert exemplars.draft_set(stored, exemplars.NEW, draft) == [*stored, draft]


def test_exemplar_check_lists_tag_errors_and_missing_fields(settings):
    assert exemplar_sets.check_exemplar(settings, DEMO[0]) == []
    broken = exemplar_sets.check_exemplar(settings, {**DEMO[0], "solution": DEMO[0]["solution"]
                                                     + " <search>oops"})
    assert any("unbalanced <search> tags" in f["message"] for f in broken)
    # a form still to fill is no error: it says what to write (issue 42, item 12)
    assert exemplars.check(settings, "", "x", "").startswith("*Write its question: ")
    assert exemplars.check(settings, "", "", "").startswith("*Write its question and solution")
    assert "✗" not in exemplars.check(settings, "q", "  ", "")
    too_long = exemplars.check(settings, "q", "x" * settings.max_exemplar_chars, "")
    assert "Not an exemplar yet" in too_long
    assert markdown_text("(setting STUDIO_MAX_EXEMPLAR_CHARS)") in too_long


def test_form_round_trip_keeps_every_key_of_an_uploaded_config():
    uploaded = launch.default_config()
    uploaded.update(name="round-trip", model="/models/tiny", seed=7, tools=["python", "search"])
    uploaded["data"].update(corpus="c", train="t", eval=["e"], exemplars="x")
    uploaded["grpo"].update(warmup_ratio=0.25, lr=3e-6)  # warmup is not on the form
    uploaded["reward"].update(answer_match="numeric")  # a choice on the form
    uploaded["sentinel"]["kl_spike"].update(action="pause", threshold=20.0)  # a threshold: YAML
    uploaded["curriculum"] = {"preset": None, "steps_per_stage": 100, "adaptive": None,
                              "soft": {"start": 0.5},  # not on the Curriculum page: YAML
                              "stages": [{"exemplars": 2, "steps": 5},
                                         {"exemplars": 0, "steps": 5}]}
    config = parse_run_config(uploaded)
    fields = launch.form_values(config)
    assert fields[3:5] == ("folder", "/models/tiny")
    assert fields[12] == ["python", "search"]  # the tools' checkboxes
    assert launch.assemble(*fields) == uploaded


@pytest.mark.parametrize("tool", ["python", "calculator"])
def test_the_tools_checkboxes_choose_the_runs_tools(tool):
    form = [launch.default_config(), None, "r", "shelf", "", "c", "t", None, "", "native",
            "cpu", "chat", [tool], False, None, None, *[None] * len(launch.SETTINGS)]
    assert parse_run_config(launch.assemble(*form)).tools == [tool]
    assert launch.assemble(*form)["data"]["corpus"] is None, "a run without search names none"
    form[5] = None  # no corpus stored: the dropdown is empty
    assert parse_run_config(launch.assemble(*form)).data.corpus is None
    assert launch.TOOL_CHOICES[:3] == ("search", "python", "calculator")  # (then test tools)
    info = config_field("tools").description  # the checkboxes' help: one clause per tool
    assert "calculator (an arithmetic expression in <calc>, its value back in <result>)" in info
    form[12] = []
    with pytest.raises(RunConfigError, match="tools: name at least one tool"):
        parse_run_config(launch.assemble(*form))


def test_empty_settings_fall_back_to_the_base_config():
    base = launch.default_config()
    form = [base, None, "r", "shelf", "", "c", "t", None, "", "native", "cpu", "chat",
            ["search"], False, None, None, *[None] * len(launch.SETTINGS)]
    config = launch.assemble(*form)
    assert config["grpo"] == base["grpo"] and config["data"]["exemplars"] is None
    assert config["curriculum"]["stages"] == curriculum.default_design()["stages"]
    assert config["model"] == launch.DEFAULT_MODEL


def test_the_sentinel_accordion_sets_each_signals_action():
    form = [launch.default_config(), None, "r", "shelf", "", "c", "t", None, "", "native",
            "cpu", "chat", ["search"], False, None, None, *[None] * len(launch.SETTINGS)]
    form[16 + [s.path for s in launch.SETTINGS].index("sentinel.search_stopped.action")] = "pause"
    sentinel = parse_run_config(launch.assemble(*form)).sentinel
    assert (sentinel.search_stopped.action, sentinel.search_stopped.window) == ("pause", 5)
    assert sentinel.kl_spike.action == "warn"
    labels = [s.label for s in launch.SENTINEL_SETTINGS]
    assert labels[:2] == ["Format score falling", "Tool use stopped"]
    assert launch.SENTINEL_SETTINGS[1].explain.startswith(
        "Calls of its tools per rollout fell to almost none after the model had been using them")


def test_the_grpo_variants_accordion_sets_each_option_and_an_empty_box_unsets_one():
    base = launch.default_config()
    base["grpo"]["dual_clip"] = 3.0  # an uploaded config's value, cleared on the form
    form = [base, None, "r", "shelf", "", "c", "t", None, "", "native", "cpu", "chat",
            ["search"], False, None, None, *[None] * len(launch.SETTINGS)]
    paths = [s.path for s in launch.SETTINGS]
    chosen = {"grpo.norm_adv_by_std": False, "grpo.loss_agg_mode": "seq-mean-token-sum-norm",
              "grpo.clip_high": 0.28, "grpo.kl_estimator": "k2", "grpo.kl_in": "reward",
              "grpo.dynamic_sampling": True, "grpo.overlong_buffer": 64.0,
              "grpo.ppo_epochs": 2.0}
    for path, value in chosen.items():
        form[16 + paths.index(path)] = value
    grpo = parse_run_config(launch.assemble(*form)).grpo
    assert (grpo.norm_adv_by_std, grpo.loss_agg_mode, grpo.clip_high, grpo.kl_estimator,
            grpo.kl_in, grpo.dynamic_sampling, grpo.overlong_buffer, grpo.ppo_epochs) == (
        False, "seq-mean-token-sum-norm", 0.28, "k2", "reward", True, 64, 2)
    assert grpo.dual_clip is None and grpo.ratio_level == "token"
    choices = {s.path: s.choices for s in launch.SETTINGS}
    assert choices["grpo.ratio_level"] == ("token", "sequence")  # picked, not typed
    assert all(launch.config_field(p).description for p in launch.GRPO_OPTIONS)


def test_the_launch_form_carries_the_guidance_block_and_the_call_bonus():
    """Beside the curriculum: the mode and share shown, the other options folded away, each
    labelled and explained by its own field; the launched config carries them."""
    form = [launch.default_config(), None, "r", "shelf", "", "c", "t", None, "", "native",
            "cpu", "chat", ["calculator"], False, None, None, *[None] * len(launch.SETTINGS)]
    paths = [s.path for s in launch.SETTINGS]
    chosen = {"guidance.mode": "mixed", "guidance.share": 0.25, "guidance.shaping": "luffy",
              "guidance.gamma": 0.2, "guidance.when": "all-failed",
              "prompt.exemplar_selection": "sample", "prompt.exemplar_draw": "per-step",
              "reward.call_bonus": 0.1}
    for path, value in chosen.items():
        form[16 + paths.index(path)] = value
    config = parse_run_config(launch.assemble(*form))
    assert config.guidance.model_dump() == {
        "mode": "mixed", "share": 0.25, "shaping": "luffy", "gamma": 0.2, "when": "all-failed"}
    assert (config.prompt.exemplar_selection, config.prompt.exemplar_draw) == (
        "sample", "per-step")
    assert config.reward.call_bonus == 0.1
    fields = {s.path: s for s in launch.GUIDANCE_SETTINGS}
    assert list(fields) == list(chosen) and curriculum.GUIDANCE_SHOWN == (
        "guidance.mode", "guidance.share")
    assert (fields["guidance.mode"].label, fields["guidance.mode"].choices) == (
        config_field("guidance.mode").title, ("shown", "mixed"))
    assert fields["guidance.when"].choices == ("always", "all-failed")
    assert fields["prompt.exemplar_draw"].choices == ("per-question", "per-step")
    assert all(s.explain == config_field(s.path).description for s in fields.values())
    form[16 + paths.index("guidance.mode")] = None  # an empty field: the base's, shown
    assert parse_run_config(launch.assemble(*form)).guidance.mode == "shown"


def test_the_curriculum_page_says_the_guidance_with_the_options_that_apply():
    def line(path: str, value: str) -> str:
        return f"- {markdown_text(config_field(path).title)}: {markdown_text(value)}"

    shown = curriculum.guidance_words(None)
    mode = config_field("guidance.mode")
    assert shown.startswith(f"**{mode.title}: shown** (set on the **Launch** page). "
                            f"{markdown_text(mode.description)}")
    assert shown.splitlines()[2:] == [line("prompt.exemplar_selection", "first"),
                                      line("reward.call_bonus", "0")], "the rest: mixed only"
    mixed = {"guidance.mode": "mixed", "guidance.share": 0.5, "guidance.shaping": "none",
             "guidance.gamma": 0.1, "guidance.when": "always",
             "prompt.exemplar_selection": "sample", "prompt.exemplar_draw": "per-step",
             "reward.call_bonus": 0.1}
    assert curriculum.guidance_words(mixed).splitlines()[2:] == [
        line("guidance.share", "0.5"), line("guidance.shaping", "none"),
        line("guidance.when", "always"), line("prompt.exemplar_selection", "sample"),
        line("prompt.exemplar_draw", "per-step"), line("reward.call_bonus", "0.1")]
    luffy = curriculum.guidance_words({**mixed, "guidance.shaping": "luffy"})
    assert line("guidance.gamma", "0.1") in luffy.splitlines()
    hostile = curriculum.guidance_words({**mixed, "guidance.when": "<b>x</b>"})
    assert "<b>" not in hostile


def test_the_form_picks_the_precision_among_the_configs_own_values():
    form = [launch.default_config(), None, "r", "shelf", "", "c", "t", None, "", "native", "cpu",
            "chat", ["search"], False, None, None, *[None] * len(launch.SETTINGS)]
    precision = next(s for s in launch.SETTINGS if s.path == "engine.dtype")
    assert precision.label == "Precision" and "bfloat16-autocast" in precision.choices
    assert parse_run_config(launch.assemble(*form)).engine.dtype == "auto"
    form[16 + launch.SETTINGS.index(precision)] = "bfloat16-autocast"
    assert parse_run_config(launch.assemble(*form)).engine.dtype == "bfloat16-autocast"


def launch_form(model, name: str, design: dict) -> list:
    """The Launch page's form: the tiny model on the demo pack, defaults elsewhere."""
    return [launch.default_config(), design, name, "folder", str(model), "demo", "demo", [],
            "demo", "native", "cpu", "chat", ["search"], False, None, None,
            *[None] * len(launch.SETTINGS)]


def test_launch_suggests_a_fresh_name_says_what_is_missing_and_renames_a_duplicate(studio):
    settings, model = studio
    design = curricula.preset_design("3-2-0", 1)
    name, suggested, note = launch.suggest_name(settings, "", "", "demo", design)
    assert name == suggested == "demo-3-2-0" and note == ""

    refused, told = launch.launch(settings, admin(settings), "Runs", *launch_form(model, " ",
                                                                                  design))
    assert refused is None and "Give the run a name" in told
    assert "character" not in told  # not the schema's words
    assert launch.name_note(settings, "", "demo", design) == \
        "**Give the run a name**, e.g. `demo-3-2-0`."

    first, told = launch.launch(settings, admin(settings), "Runs", *launch_form(model, name,
                                                                                design))
    assert first and "exists" not in told
    assert launch.suggest_name(settings, name, suggested, "demo", design)[:2] == (
        "demo-3-2-0-2", "demo-3-2-0-2"), "the launched name is not kept"
    assert launch.suggest_name(settings, "mine", suggested, "demo", design)[0] == "mine"
    assert launch.name_note(settings, name, "demo", design) == (
        f"A run named `demo-3-2-0` exists (#{first}); this one will be `demo-3-2-0-2`.")

    second, told = launch.launch(settings, admin(settings), "Runs", *launch_form(model, name,
                                                                                 design))
    assert runs.get_run(settings, second)["name"] == "demo-3-2-0-2"
    assert markdown_text(f"Run #{second} 'demo-3-2-0-2' is queued") in told
    assert markdown_text("(a run named 'demo-3-2-0' exists)") in told
    assert runs.runs_named(settings, "demo-3-2-0") == [first]
    assert runs.free_run_name(settings, "demo-3-2-0") == "demo-3-2-0-3"
    long = "x" * 128  # the longest name a run may have: cut to fit its suffix
    with session_scope(settings.sqlalchemy_url) as session:
        session.add(Run(name=long))
    assert runs.free_run_name(settings, long) == "x" * 126 + "-2"


def test_draft_previews_count_tokens(settings, tmp_path):
    model = str(build_tiny_model(tmp_path / "tiny"))
    result = preview_exemplars(settings, DEMO[:2], "Where is Fennick Light?", model=model)
    assert [p["k"] for p in result["prompts"]] == [0, 1, 2]
    assert result["prompts"][0]["tokens"] < result["prompts"][2]["tokens"]
    with pytest.raises(InvalidInput, match="outside 0..2"):
        preview_exemplars(settings, DEMO[:2], "q", ks=[3], model=model)


def test_a_preview_for_the_python_tool_instructs_python_only(settings, tmp_path):
    """The preview builds the prompt as a run with these tools does: `<code>`/`<output>` in
    the instruction for python alone, no search; search alone keeps method.md's words."""
    model = str(build_tiny_model(tmp_path / "tiny"))
    math = [json.loads(line) for line in MATH_EXEMPLARS.read_text().splitlines()[:2]]
    shown = preview_exemplars(settings, math, "What is 6 times 7?", model=model,
                              tools=["python"])
    text = shown["prompts"][0]["text"]
    assert shown["tools"] == ["python"] and instruction_for(["python"]) in text
    assert "<code> and </code>" in text and "<output> and </output>" in text
    assert "<search>" not in text and "<information>" not in text
    searched = preview_exemplars(settings, DEMO[:1], "Where is Fennick Light?", model=model)
    assert DEFAULT_INSTRUCTION in searched["prompts"][0]["text"]
    assert searched["prompts"] == preview_exemplars(
        settings, DEMO[:1], "Where is Fennick Light?", model=model, tools=("search",))["prompts"]
    for bad, words in ((["grep"], "unknown tool 'grep'"), ([], "at least one tool"),
                       (["python", "python"], "'python' is listed more than once")):
        with pytest.raises(InvalidInput, match=f"^tools: .*{words}"):
            preview_exemplars(settings, math, "q", model=model, tools=bad)
    assert exemplars.open_set(settings, None)[2] == ["search"]
    assert tools_written(math) == ["python"] and tools_written(DEMO) == ["search"]
    page = exemplars.preview(settings, math, 1, "", "", "", model, "chat", ["python"], "q", 2)
    assert "<code> and </code>" in page[2] and "tools `python`" in page[4]
    # the turns, each under who speaks; the template's raw text only in the folded box
    turns = page[1]
    assert [label for label in re.findall(r'class="prompt-role">([^<]*)<', turns)] == [
        "System: the instruction", "User", "Assistant", "User", "Assistant", "User",
        exemplars.WRITES_ON]
    assert "&lt;code&gt; and &lt;/code&gt;" in turns and "<|im_start|>" not in turns
    assert "<|im_start|>" in page[2]
    # the k it was asked for stays as the user may have picked since; one gone is replaced
    assert page[3].constructor_args == {"choices": list(range(len(math) + 1))}
    gone = exemplars.preview(settings, math, 1, "", "", "", model, "chat", ["python"], "q", 9)
    assert gone[3].constructor_args["value"] == len(math) and f"k = {len(math)}:" in gone[4]


def test_a_try_shows_the_set_s_exemplars_up_to_three_unless_told():
    """Issue 42, item 10: k was 0 by default, refused on the first press."""
    def k_of(size: int, k: int | None = None) -> dict:
        return exemplars.try_k_choice([{}] * size, k).constructor_args

    assert k_of(2) == {"choices": [1, 2], "value": 2}
    assert k_of(5) == {"choices": [1, 2, 3, 4, 5], "value": 3}
    assert k_of(5, 4)["value"] == 4 and k_of(2, 4)["value"] == 2  # kept while it fits
    assert k_of(0) == {"choices": [], "value": None}


def test_a_set_that_calls_the_calculator_previews_with_the_calculator(settings, tmp_path):
    """The arithmetic pack's exemplars write `<calc>`: the preview starts with the calculator
    ticked, and its prompt names `<calc>`/`<result>` and no other tool."""
    model = str(build_tiny_model(tmp_path / "tiny"))
    calc = [json.loads(line) for line in CALC_EXEMPLARS.read_text().splitlines()]
    assert tools_written(calc) == ["calculator"]
    assert tools_written(calc + DEMO[:1]) == ["search", "calculator"]
    page = exemplars.preview(settings, calc, 1, "", "", "", model, "chat", ["calculator"],
                             "What is 12 × 34?", 1)
    assert instruction_for(["calculator"]) in page[2] and "tools `calculator`" in page[4]
    assert "<calc> and </calc>" in page[2] and "<result> and </result>" in page[2]
    assert "<search>" not in page[2] and "<code>" not in page[2]
    assert "<calc> … </calc> <result> … </result>" in exemplars.CALLS_AND_RESULTS


def test_launch_says_what_to_load_when_there_is_nothing_to_train_on(settings):
    from studio.services.demo import load_calc_pack

    assert launch.data_choices(settings, None, None, None, None)[4] == \
        launch.NOTHING_TO_TRAIN_ON
    load_calc_pack(settings, admin(settings))
    corpus, train, _, chosen, empty = launch.data_choices(settings, None, None, None, None)
    assert empty == "", "a QA set is enough: a calculator run names no corpus"
    assert (corpus.value, train.value, chosen.value) == (None, "calc", "calc")


def test_the_data_doctor_section_asks_for_what_is_missing_and_quotes_names_as_text(settings):
    from frontend.pages import data

    with pytest.raises(gr.Error, match="corpus: choose a corpus"):
        data.run_doctor(settings, None, 1, None, 3)
    with pytest.raises(gr.Error, match="QA set: choose a QA set, an exemplar set, or both"):
        data.run_doctor(settings, 1, None, None, 3)
    report = {"corpus": "*c*", "exemplar_set": "<b>e</b>", "k": 3, "flagged": 1, "exemplars": [
        {"number": 1, "question": "ok?", "findings": []},
        {"number": 2, "question": "[x](javascript:y)", "findings": ["search 1 '<i>': none"]}]}
    shown = data.replay_markdown(report)
    assert shown.splitlines()[2] == "- ✓ " + markdown_text(
        "1. ok?: ok, the corpus returns what it shows")
    assert shown.splitlines()[3] == "- ⚠ " + markdown_text(
        "2. [x](javascript:y): search 1 '<i>': none")
    assert "<b>" not in shown and "*c*" not in shown


@pytest.mark.parametrize(("button", "words", "tool"), [
    ("load_math", "Math pack loaded: QA set 'math' (200 questions to train on)",
     "the python tool (its exemplars run Python)"),
    ("load_calc", "Arithmetic pack loaded: QA set 'calc' (260 questions to train on)",
     "the calculator tool (its exemplars call `<calc>`)")], ids=["math", "calc"])
def test_a_tool_pack_button_stores_the_pack_and_says_what_to_train_with(settings, button,
                                                                        words, tool):
    from frontend.pages import data

    told = getattr(data, button)(settings, admin(settings))
    pack = words.split("'")[1]
    for shown in (words, f"'{pack}-heldout' (60 held-out questions"):
        assert markdown_text(shown) in told, shown
    preset = {"math": "math", "calc": "calculator"}[pack]
    # its ready-made run, set up for it: no config key for the user to type
    assert told.endswith(f"Next: choose the ready-made run `{preset}` at the top of the "
                         f"**Launch** page and launch it: it trains with {tool} and compares "
                         "answers as numbers, all set for you.")
    assert "reward.answer_match" not in told
    assert [s["name"] for s in exemplar_sets.list_exemplar_sets(settings)] == [pack]


def test_what_to_expect_is_written_from_the_stored_results(tmp_path, monkeypatch):
    """Item 3 of issue 42: the Launch page's *What to expect* and the Home page's quick start
    come from the stored bench results (studio/demo/measured/): a copy with one figure
    changed changes both, and the time quoted with them."""
    import shutil

    from studio.services import presets

    shutil.copytree(presets.MEASURED, tmp_path / "measured")
    monkeypatch.setattr(presets, "MEASURED", tmp_path / "measured")
    stored = tmp_path / "measured" / presets.RECOMMENDED / "seed0.json"
    before = (launch.preset_expectation(presets.RECOMMENDED), home.intro())
    assert presets.expectation(presets.RECOMMENDED) in before[0]
    assert markdown_text(presets.took(presets.measured_runs(presets.RECOMMENDED))) in before[1]

    result = json.loads(stored.read_text())
    (arm,) = [name for name in result["results"] if name != "base"]
    result["results"][arm]["em"] = 0.37
    result["minutes"]["all"] = 140.2
    stored.write_text(json.dumps(result))
    after = (launch.preset_expectation(presets.RECOMMENDED), home.intro())
    for page_text, shown in zip(after, (str, markdown_text), strict=True):  # Home's escaped
        assert shown("answered 37%, ") in page_text, page_text
        assert shown("A run took 74-140 minutes") in page_text, page_text
    assert all("37%" not in text and "140" not in text for text in before)


def test_launch_says_why_its_default_curriculum_is_longer_than_the_ready_made_runs():
    words = launch.curriculum_words(None)
    assert words.startswith("**Curriculum:** 3 → 2 → 0 exemplars over 300 steps.")
    assert "the paper trained 100 steps a stage on four large GPUs, and the ready-made runs " \
        "above show the method in 20-22 small steps" in words
    short = {"stages": [{"exemplars": 3, "steps": 6}, {"exemplars": 0, "steps": 6}]}
    assert "long on a CPU" not in launch.curriculum_words(short)
    assert curriculum.steps_info().startswith("100 a stage is the paper's length")


def test_the_demo_pack_button_names_every_qa_set_of_the_pack(settings):
    from frontend.pages import data
    from studio.services.demo import load_demo_pack

    load_demo_pack(settings, admin(settings), index_now=True)  # indexed here, not queued
    told = data.load_demo(settings, admin(settings))
    for shown in ("QA set 'demo' (196 questions to train on)",
                  "QA set 'demo-heldout' (60 held-out questions to evaluate on)",
                  "QA sets 'demo-span' and 'demo-span-heldout' (90 and 30 questions answered "
                  "by a date, a count or a name)", "exemplar set 'demo' (3 exemplars)"):
        assert markdown_text(shown) in told, shown


def test_the_model_shelf_gives_an_admin_the_install_command_and_others_an_admin(
        settings, monkeypatch):
    """A model not installed: an admin gets the command to copy (the studio's own Python);
    a member, who cannot run it, reads that an admin adds models, and no pip command."""
    def not_installed():
        raise base_models.ModelNotAvailable("the package absent-gguf is not installed")

    monkeypatch.setitem(base_models.PACKAGED_MODELS, "absent-model", base_models.PackagedModel(
        name="absent-model", title="Absent-1M", upstream="test/absent", licence="apache-2.0",
        pip_name="absent-gguf", locate=not_installed))
    for actor, ready, words in (
            (admin(settings), "not installed: the command is under the table",
             model_shelf.admin_words(settings)),
            (user(settings, "mia"), "not installed: ask an admin to add it",
             model_shelf.ASK_AN_ADMIN)):
        rows, command, said = model_shelf.shelf_view(settings, actor)
        (absent,) = [row for row in rows if row[0] == "absent-model"]
        assert absent[1:6] == ["Absent-1M, from the model package absent-gguf", ready,
                               "size known after its first use", "apache-2.0",
                               "known after its first use"]
        assert said == words
        shown = command.constructor_args
        if actor.is_admin:
            assert shown["visible"] and shown["value"].splitlines()[-1].endswith(
                " -m pip install absent-gguf")
        else:
            assert shown["visible"] is False and "pip" not in json.dumps([rows, said])
    assert [header for _, header in model_shelf.SHELF_COLUMNS][2:6] == [
        "Ready to train here?", "Size", "Licence", "Chat model?"]


def test_an_admin_sets_a_users_export_quota_on_the_team_page_and_a_member_cannot(settings):
    """The quota is typed and shown as a size (500 MB, 2 GB), not in raw bytes; a bad one is
    refused naming the field and how to write it."""
    boss, mia = admin(settings), user(settings, "mia")

    def quota_shown() -> object:
        (row,) = [r for r in team.users_view(settings, boss)[1] if r[1] == "mia"]
        return row[-1]

    for typed, held, shown in ((" 500 MB ", "500.0 MB (500000000 bytes)", "500.0 MB"),
                               ("1.5gb", "1.5 GB (1500000000 bytes)", "1.5 GB"),
                               ("2 GiB", "2.1 GB (2147483648 bytes)", "2.1 GB"),
                               ("5000000", "5.0 MB (5000000 bytes)", "5.0 MB")):
        said = team.set_export_quota(settings, boss, "mia", typed)
        assert said == ok_markdown(f"mia's exports may hold {held}"), said
        assert quota_shown() == shown
    for who, quota, words in ((boss, "5 parsecs", "export quota: '5 parsecs' is not a size; "
                                                  "write it as 500 MB or 2 GB"),
                              (boss, "-3 GB", "export quota: '-3 GB' is not a size"),
                              (mia, "", "mia may not set export quotas")):
        said = team.set_export_quota(settings, who, "mia", quota)
        assert said.startswith("**✗ Nothing changed") and markdown_text(words) in said, said
    assert quota_shown() == "5.0 MB"
    said = team.set_export_quota(settings, boss, "mia", "")
    assert markdown_text("the default, 20.0 GB (20000000000 bytes)") in said, said
    assert quota_shown() == "default (20.0 GB)"

