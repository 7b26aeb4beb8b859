"""The Exemplars page: edit one worked example, its tags checked as you type, beside the
prompt the model will read with k = 0..N exemplars and its length in the model's tokens.

The preview uses the exemplar being edited (not yet saved) in place of the
stored one, so a change shows in the prompt before it is kept.
"""

from __future__ import annotations

import gradio as gr

from frontend.components import (
    acting,
    choices,
    dataframe,
    empty_state,
    error_markdown,
    ok_markdown,
    table,
)
from frontend.shared import current, on_show, page_timer
from studio.escaping import code_span, markdown_text
from studio.method.drafting import GAP
from studio.method.prompt import SEARCH_ONLY
from studio.method.tools import TOOLS, all_specs
from studio.run_config import PromptSpec
from studio.services import corpora, evaluations, exemplar_drafts, exemplar_sets, qa_sets
from studio.services.access import Actor
from studio.services.errors import InvalidInput, UserError
from studio.services.prompt_preview import MAX_PREVIEW_CHARS, preview_exemplars, tools_written
from studio.settings import Settings

TITLE = "Exemplars"

INTRO = """
## Exemplars
An exemplar is one worked example: a question, then the whole trace of solving it
with `<think>`, each tool call and what the environment returned (`<search>` and the
`<information>` it found; `<code>` and the `<output>` it printed; `<calc>` and the
`<result>` the calculator gave), and the final `<answer>`. Its tags are checked as you
type; on the right is the prompt the model will read at each stage of the curriculum
(k = how many exemplars it shows), with the instruction for the tools you tick.
"""

CALLS_AND_RESULTS = ", or ".join(
    f"<{s.call_tag}> … </{s.call_tag}> <{s.result_tag}> … </{s.result_tag}>" for s in all_specs())
"""Each registered tool's call and result tags, as a solution writes them."""
NEW = 0
"""The exemplar choice that starts a new exemplar (stored ones are numbered from 1)."""
TOKEN_COLUMNS = [("k", "Exemplars shown (k)"), ("tokens", "Prompt tokens")]
FALLBACK_QUESTION = "Which island is the town of Nettlebarrow on?"


def finding_lines(findings: list[dict]) -> str:
    if not findings:
        return "**✓ Tags look right:** nothing to fix."
    errors = sum(f["severity"] == "error" for f in findings)
    lines = [f"- {'✗ error' if f['severity'] == 'error' else '⚠ warning'}: "
             f"{markdown_text(f['message'])}" for f in findings]
    head = f"**{errors} to fix before training**" if errors else "**Only warnings**"
    return head + "\n\n" + "\n".join(lines)


def check(settings: Settings, question: str, solution: str, answer: str) -> str:
    """The findings of the exemplar as typed (nothing stored)."""
    try:
        return finding_lines(exemplar_sets.check_exemplar(settings,
                                                          _item(question, solution, answer)))
    except UserError as exc:
        return error_markdown(str(exc), "Not an exemplar yet")


def _item(question: str | None, solution: str | None, answer: str | None) -> dict:
    """The boxes as an exemplar (Gradio sends None for a box it has not filled yet)."""
    return {"question": question or "", "solution": solution or "",
            "answer": (answer or "").strip() or None}


def draft_set(stored: list[dict], number: int, item: dict) -> list[dict]:
    """The set as it would be with the edited exemplar saved (replaced, or added at the end)."""
    if NEW < number <= len(stored):
        return [item if i == number - 1 else e for i, e in enumerate(stored)]
    return [*stored, item]


def preview(settings: Settings, stored: list[dict] | None, number: int | None, question: str,
            solution: str, answer: str, model: str, layout: str, tools: list[str], asked: str,
            k: int | None):
    """Token counts for k = 0..N and the prompt text for the chosen k (its instruction for
    `tools`, as a run with them reads it), or why there are none."""
    exemplars, item = stored or [], _item(question, solution, answer)
    if item["question"].strip() and item["solution"].strip():
        exemplars = draft_set(exemplars, number or NEW, item)
    try:
        result = preview_exemplars(settings, exemplars, asked or "", layout=layout,
                                   model=(model or "").strip() or None,
                                   assistant_prefix=PromptSpec().assistant_prefix,
                                   tools=tools or [])
    except UserError as exc:
        return [], "", gr.skip(), error_markdown(str(exc), "No preview")
    prompts = {shown["k"]: shown for shown in result["prompts"]}
    ks = list(prompts)
    # k as read when the event fired: the user may have picked another since (that pick
    # queues its own preview), so the pick is rewritten only when it no longer exists
    k_choice = gr.Radio(choices=ks) if k in ks else gr.Radio(choices=ks, value=ks[-1])
    k = k if k in ks else ks[-1]
    note = (f"Counted with the tokenizer of {code_span(result['model'])}; layout "
            f"{code_span(layout)}; tools {', '.join(map(code_span, result['tools']))}. "
            f"k = {k}: {prompts[k]['tokens']} tokens.")
    if result["not_shown"]:
        note += (f" Not shown: k = {min(result['not_shown'])} and more, whose prompts pass "
                 f"{MAX_PREVIEW_CHARS:,} characters together.")
    return table(result["prompts"], TOKEN_COLUMNS), prompts[k]["text"], k_choice, note


def sample_question(settings: Settings) -> str:
    """The first question of the first QA set, so the preview looks like training."""
    for qa_set in qa_sets.list_qa_sets(settings):
        rows = qa_sets.qa_rows(settings, qa_set["id"], 0, 1)["rows"]
        if rows:
            return rows[0]["question"]
    return FALLBACK_QUESTION


def set_choices(settings: Settings, selected: int | None):
    rows = exemplar_sets.list_exemplar_sets(settings)
    ids = [row["id"] for row in rows]
    value = selected if selected in ids else (ids[0] if ids else None)
    empty = "" if rows else empty_state(
        "No exemplar set yet.", "Load the demo pack or upload a set on the **Data** page, "
        "or start a new set below.")
    return gr.Dropdown(choices=choices(rows, lambda e: e["name"], value="id"), value=value), empty


def exemplar_choices(stored: list[dict], number: int) -> gr.Dropdown:
    labels = [(f"{e['number']}. {e['question'][:70]}", e["number"]) for e in stored]
    return gr.Dropdown(choices=[*labels, ("+ a new exemplar", NEW)], value=number)


def open_set(settings: Settings, set_id: int | None, number: int | None = None):
    """The stored exemplars of a set, the exemplar to edit (the first, or `number`) and the
    tools its solutions call (what the preview starts with)."""
    stored = exemplar_sets.get_exemplar_set(settings, set_id)["exemplars"] if set_id else []
    if number is None or number > len(stored):
        number = 1 if stored else NEW
    return stored, exemplar_choices(stored, number), tools_written(stored)


def fields(stored: list[dict] | None, number: int | None):
    """The question, solution and answer boxes for exemplar `number` (empty for a new one)."""
    stored = stored or []
    if number and number <= len(stored):
        e = stored[number - 1]
        return e["question"], e["solution"], e["answer"] or ""
    return "", "", ""


def save(settings: Settings, actor: Actor, set_id: int | None, number: int | None,
         question: str, solution: str, answer: str):
    """Store the edit (a new exemplar is added at the end); say what the set now holds."""
    if not set_id:
        return gr.skip(), gr.skip(), error_markdown("exemplar set: choose or create a set first",
                                                    "Not saved")
    item = _item(question, solution, answer)
    try:
        if number:
            found = exemplar_sets.update_exemplar(settings, actor, set_id, number, item)
        else:
            found = exemplar_sets.add_exemplar(settings, actor, set_id, item)
            number = found["size"]
    except UserError as exc:
        return gr.skip(), gr.skip(), error_markdown(str(exc), "Not saved")
    stored = found["exemplars"]
    message = ok_markdown(f"Saved exemplar {number} of '{found['name']}'")
    if found["errors"]:
        message += (f"\n\nThe set has {found['errors']} errors: a run cannot use it until "
                    "they are fixed.")
    return stored, exemplar_choices(stored, number), message


def delete(settings: Settings, actor: Actor, set_id: int | None, number: int | None):
    if not set_id or not number:
        return gr.skip(), gr.skip(), error_markdown("exemplar: choose a stored exemplar first",
                                                    "Nothing deleted")
    try:
        found = exemplar_sets.delete_exemplar(settings, actor, set_id, number)
    except UserError as exc:
        return gr.skip(), gr.skip(), error_markdown(str(exc), "Nothing deleted")
    stored = found["exemplars"]
    return (stored, exemplar_choices(stored, 1 if stored else NEW),
            ok_markdown(f"Deleted exemplar {number} of '{found['name']}'"))


def create_set(settings: Settings, actor: Actor, name: str):
    try:
        found = exemplar_sets.create_exemplar_set(settings, actor, name)
    except UserError as exc:
        return gr.skip(), gr.skip(), error_markdown(str(exc), "No set created")
    dropdown, empty = set_choices(settings, found["id"])
    return dropdown, empty, ok_markdown(f"Created the empty set '{found['name']}': write its "
                                        "first exemplar below")


def draft_sources(settings: Settings):
    """The QA sets and corpora a draft can come from, as the two dropdowns' choices."""
    qa_names = [row["name"] for row in qa_sets.list_qa_sets(settings)]
    corpus_names = [row["name"] for row in corpora.list_corpora(settings)]
    return (gr.Dropdown(choices=qa_names, value=qa_names[0] if qa_names else None),
            gr.Dropdown(choices=corpus_names, value=corpus_names[0] if corpus_names else None))


def draft_set_from_data(settings: Settings, actor: Actor, qa_set: str | None, tool: str,
                        corpus: str | None, name: str):
    """Draft three exemplars from `qa_set` with the tool's real output, store them as a new
    set (named `name`, else after the QA set) and open it in the editor."""
    if not qa_set:
        return gr.skip(), gr.skip(), error_markdown("QA set: upload or load one on the Data "
                                                    "page first", "Nothing drafted")
    try:
        drafted = exemplar_drafts.draft_exemplars(settings, actor, qa_set=qa_set, tool=tool,
                                                  corpus=corpus)
        if not drafted["drafts"]:
            raise InvalidInput(
                f"qa_set: none of the {drafted['scanned']} questions read could be drafted "
                f"with {tool}; try another QA set or tool")
        found = exemplar_sets.create_exemplar_set(
            settings, actor, (name or "").strip() or f"{qa_set}-draft",
            [{key: d[key] for key in ("question", "solution", "answer")}
             for d in drafted["drafts"]])
    except UserError as exc:
        return gr.skip(), gr.skip(), error_markdown(str(exc), "Nothing drafted")
    dropdown, empty = set_choices(settings, found["id"])
    gaps = (f" {drafted['gaps']} leave the tool call for you to write where it says {GAP}."
            if drafted["gaps"] else "")
    return dropdown, empty, ok_markdown(  # (it escapes the names)
        f"Drafted {found['size']} exemplars from {drafted['scanned']} questions of "
        f"'{qa_set}' into the set '{found['name']}', with the tool's real output inside."
        f"{gaps} They are drafts: read each one below, fix what is flagged, and save it.")


TRIED_QUESTIONS = 5
TRY_COLUMNS = [("question", "Question"), ("called", "Called the tool"),
               ("answer", "Its answer"), ("right", "Right")]


def try_exemplars(settings: Settings, actor: Actor, set_id: int | None, qa_set: str | None,
                  corpus: str | None, model: str, layout: str, tools: list[str], k: int | None):
    """Queue the model on the first five questions of `qa_set` with k exemplars of the set
    before each, as the first training steps will show them (an evaluation on the worker)."""
    if not set_id or not qa_set or not k:
        return None, error_markdown("choose an exemplar set, a QA set and k > 0 (Exemplars "
                                    "shown, on the right)", "Not tried"), gr.skip()
    try:
        name = exemplar_sets.get_exemplar_set(settings, set_id)["name"]
        queued = evaluations.create_evaluation(
            settings, actor, qa_set=qa_set, corpus=corpus if "search" in tools else None,
            model=(model or "").strip() or settings.default_model, limit=TRIED_QUESTIONS,
            exemplar_set=name, protocol={"exemplars": int(k), "tools": tools or ["search"],
                                         "layout": layout})
    except UserError as exc:
        return None, error_markdown(str(exc), "Not tried"), gr.skip()
    return queued["id"], f"*Queued: {TRIED_QUESTIONS} questions with {k} exemplars...*", \
        gr.Timer(active=True)


def try_report(settings: Settings, evaluation_id: int | None) -> tuple[str, list, bool]:
    """The try's outcome in words and per question, and whether it is still to come."""
    if not evaluation_id:
        return "", [], False
    found = evaluations.get_evaluation(settings, evaluation_id)
    if found["state"] in ("queued", "running"):
        done = (found["params"] or {}).get("done", 0)
        return f"*{found['state']}: {done} of {TRIED_QUESTIONS} questions...*", [], True
    if found["state"] != "succeeded":
        return error_markdown(found["error"] or found["state"], "The try did not finish"), \
            [], False
    records = evaluations.evaluation_records(settings, evaluation_id)
    rows = [{"question": r["question"], "called": "yes" if r["search_calls"] else "no",
             "answer": r["prediction"] or "–", "right": "yes" if r["acc"] else "no"}
            for r in records]
    called = sum(row["called"] == "yes" for row in rows)
    right = sum(row["right"] == "yes" for row in rows)
    return (f"**{called} of {len(rows)} called the tool, {right} answered right** "
            "(what the first training steps will see)"), rows, False


def build(settings: Settings) -> None:
    gr.Markdown(INTRO)
    stored = gr.State([])
    with gr.Row():
        with gr.Column(scale=1):
            with gr.Row():
                set_pick = gr.Dropdown(label="Exemplar set", choices=[], elem_id="exemplar-set")
                number = gr.Dropdown(label="Exemplar", choices=[], elem_id="exemplar-number")
            sets_empty = gr.Markdown()
            question = gr.Textbox(label="Question", elem_id="exemplar-question")
            solution = gr.Textbox(
                label="Solution: <think> … </think>, tool calls and what came back "
                      f"({CALLS_AND_RESULTS}) … <answer> … </answer>",
                lines=14, max_lines=30, elem_id="exemplar-solution")
            answer = gr.Textbox(label="Gold answer (optional: checked against the final "
                                      "<answer>)", elem_id="exemplar-answer")
            findings = gr.Markdown(elem_id="exemplar-findings")
            with gr.Row():
                save_button = gr.Button("Save exemplar", variant="primary",
                                        elem_id="save-exemplar")
                delete_button = gr.Button("Delete exemplar", variant="stop", size="md")
            message = gr.Markdown(elem_id="exemplar-save-message")
            with gr.Accordion("Start a new exemplar set", open=False):
                new_name = gr.Textbox(label="Name of the new set")
                create_button = gr.Button("Create set")
            with gr.Accordion("Draft a set from your data", open=False,
                              elem_id="draft-from-data"):
                gr.Markdown("The studio picks questions its tool can answer, runs the tool "
                            "for real and writes three worked traces; you read and fix them.")
                with gr.Row():
                    draft_qa = gr.Dropdown(label="QA set", choices=[], elem_id="draft-qa-set")
                    draft_tool = gr.Radio(list(exemplar_drafts.DRAFTED_TOOLS), value="search",
                                          label="Tool", elem_id="draft-tool")
                    draft_corpus = gr.Dropdown(label="Corpus (search)", choices=[],
                                               elem_id="draft-corpus")
                draft_name = gr.Textbox(label="Name of the drafted set (default: the QA "
                                              "set's, with -draft)", elem_id="draft-name")
                draft_button = gr.Button("Draft 3 exemplars", elem_id="draft-exemplars")
        with gr.Column(scale=1):
            with gr.Row():
                model = gr.Textbox(settings.default_model, label="Count tokens for model",
                                   info="The bundled model's name, a Hugging Face id or a "
                                        "folder", elem_id="preview-model")
                layout = gr.Radio(["chat", "inline"], value=PromptSpec().layout,
                                  label="Prompt layout",
                                  info="chat: exemplars as earlier turns; inline: the paper's "
                                       "one message")
            tools = gr.CheckboxGroup(list(TOOLS), value=list(SEARCH_ONLY),
                                     label="Tools", elem_id="preview-tools",
                                     info="The run's tools: the instruction names each one "
                                          "(a set's solutions preselect the tools they call)")
            asked = gr.Textbox(label="Question at the end of the prompt",
                               elem_id="preview-question")
            k = gr.Radio([0], value=0, label="Exemplars shown (k)", elem_id="preview-k")
            note = gr.Markdown(elem_id="preview-note")
            tokens = dataframe(TOKEN_COLUMNS, elem_id="prompt-tokens")
            with gr.Accordion(f"Try these exemplars on {TRIED_QUESTIONS} questions",
                              open=False, elem_id="try-exemplars"):
                gr.Markdown("The model above answers the first questions of a QA set with k "
                            "of this set's exemplars before each (k as chosen below): what a "
                            "run's first steps will see, measured before launch.")
                with gr.Row():
                    try_qa = gr.Dropdown(label="QA set", choices=[], elem_id="try-qa-set")
                    try_corpus = gr.Dropdown(label="Corpus (search)", choices=[],
                                             elem_id="try-corpus")
                try_button = gr.Button("Try them", elem_id="try-button")
                try_note = gr.Markdown(elem_id="try-note")
                try_table = dataframe(TRY_COLUMNS, elem_id="try-table")
                tried = gr.State(None)
                try_timer = page_timer(2.0)
            prompt = gr.Textbox(label="The prompt the model reads", lines=22, max_lines=40,
                                interactive=False, elem_id="prompt-text")

    editor = [question, solution, answer]
    preview_inputs = [stored, number, *editor, model, layout, tools, asked, k]
    preview_outputs = [tokens, prompt, k, note]

    def show_preview(*values):
        return preview(settings, *values)

    def refresh(selected):
        dropdown, empty = set_choices(settings, selected)
        return dropdown, empty, sample_question(settings)

    on_show(refresh, set_pick, [set_pick, sets_empty, asked])
    set_pick.change(lambda i: open_set(settings, i), set_pick, [stored, number, tools]).then(
        fields, [stored, number], editor)
    number.input(fields, [stored, number], editor)
    # .change, not .input: Gradio's textbox sends no input event for a deletion.
    for box in editor:
        box.change(lambda *typed: check(settings, *typed), editor, findings,
                   trigger_mode="always_last", show_progress="hidden")
    gr.on([*(box.change for box in editor), stored.change, model.submit, model.blur,
           layout.input, tools.input, asked.submit, k.input], show_preview, preview_inputs,
          preview_outputs, trigger_mode="always_last", show_progress="minimal")
    save_button.click(acting(settings, save), [set_pick, number, *editor],
                      [stored, number, message])
    delete_button.click(acting(settings, delete), [set_pick, number],
                        [stored, number, message]).then(
        fields, [stored, number], editor)
    create_button.click(acting(settings, create_set), new_name,
                        [set_pick, sets_empty, message])
    def sources():  # the draft's and the try's pickers offer the same sets
        qa_choices, corpus_choices = draft_sources(settings)
        return qa_choices, corpus_choices, qa_choices, corpus_choices

    on_show(sources, None, [draft_qa, draft_corpus, try_qa, try_corpus])
    try_button.click(acting(settings, try_exemplars),
                     [set_pick, try_qa, try_corpus, model, layout, tools, k],
                     [tried, try_note, try_timer.timer])

    def try_tick(evaluation_id, page):
        note, rows, pending = try_report(settings, evaluation_id)
        return note, table(rows, TRY_COLUMNS), try_timer.follow(page, pending)

    try_timer.timer.tick(try_tick, [tried, current().shown], [try_note, try_table,
                                                              try_timer.timer])
    draft_button.click(acting(settings, draft_set_from_data),
                       [draft_qa, draft_tool, draft_corpus, draft_name],
                       [set_pick, sets_empty, message])
