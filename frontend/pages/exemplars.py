"""The Exemplars page: edit one worked example, its tags checked as you type, beside the
prompt the model will read with k = 0..N exemplars and its length in the model's tokens;
under them, a try of the set on questions that are no exemplar's own (`exemplar_trials`).

The preview uses the exemplar being edited (not yet saved) in place of the
stored one, so a change shows in the prompt before it is kept. It shows the prompt as
turns, each labelled with who speaks (the chat template's raw text, special tokens and
all, is folded under it).
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
from studio.escaping import code_span, html_text, markdown_text
from studio.method.drafting import GAP
from studio.method.evaluation import MAX_TRIED_EXEMPLARS
from studio.method.tools import DEFAULT_TOOL_NAMES, TOOLS, all_specs, drafted_tools
from studio.run_config import PromptSpec
from studio.services import corpora, exemplar_drafts, exemplar_sets, exemplar_trials, qa_sets
from studio.services.access import Actor
from studio.services.errors import InvalidInput, UserError
from studio.services.estimates import duration_words
from studio.services.exemplar_trials import TRIED_QUESTIONS, ExemplarTry, shown_by_default
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
    """The findings of the exemplar as typed (nothing stored); while its question or
    solution is still to write, what to write (an empty form is no error)."""
    missing = [name for name, text in (("question", question), ("solution", solution))
               if not (text or "").strip()]
    if missing:
        return (f"*Write its {' and '.join(missing)}: the tags are checked as you type, and "
                "the prompt on the right shows it.*")
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


CSS = """
/* The prompt as turns: who speaks above what is said, the text as the model reads it. */
#prompt-turns .prompt-turn { border-left: 3px solid var(--border-color-primary);
  padding: 2px 0 2px 10px; margin: 0 0 10px; }
#prompt-turns .prompt-role { font-weight: 600; font-size: var(--text-sm); }
#prompt-turns .prompt-said { white-space: pre-wrap; font-family: var(--font-mono);
  font-size: var(--text-sm); }
"""
ROLES = {"system": "System: the instruction", "user": "User", "assistant": "Assistant"}
"""How the prompt's turns are labelled (a role not listed shows as it is named)."""
WRITES_ON = "Assistant: the model writes on from here"


def _turn_html(label: str, text: str) -> str:
    shown = html_text(text).replace("\r", "").replace("\n", "<br>")
    return (f'<div class="prompt-turn"><div class="prompt-role">{html_text(label)}</div>'
            f'<div class="prompt-said">{shown}</div></div>')


def turns_html(messages: list[dict], assistant_prefix: str) -> str:
    """The prompt's messages as turns, each under the label of who speaks, and last the
    start of the answer the reply is pre-filled with; as text (`html_text`), line breaks as
    <br>, on one line so that Markdown leaves it one HTML block."""
    turns = [_turn_html(ROLES.get(m["role"], m["role"]), m["content"]) for m in messages]
    return (f'<div class="prompt-turns">{"".join(turns)}'
            f'{_turn_html(WRITES_ON, assistant_prefix)}</div>')


def preview(settings: Settings, stored: list[dict] | None, number: int | None, question: str,
            solution: str, answer: str, model: str, layout: str, tools: list[str], asked: str,
            k: int | None):
    """Token counts for k = 0..N, the prompt for the chosen k as labelled turns and as the
    template's raw text (its instruction for `tools`, as a run with them reads it), or why
    there are none."""
    exemplars, item = stored or [], _item(question, solution, answer)
    if item["question"].strip() and item["solution"].strip():
        exemplars = draft_set(exemplars, number or NEW, item)
    prefix = PromptSpec().assistant_prefix
    try:
        result = preview_exemplars(settings, exemplars, asked or "", layout=layout,
                                   model=(model or "").strip() or None,
                                   assistant_prefix=prefix, tools=tools or [])
    except UserError as exc:
        return [], "", "", gr.skip(), error_markdown(str(exc), "No preview")
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
    return (table(result["prompts"], TOKEN_COLUMNS),
            turns_html(prompts[k]["messages"], prefix or ""), prompts[k]["text"], k_choice, note)


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
    """The stored exemplars of a set, the exemplar to edit (the first, or `number`), the
    tools its solutions call (what the preview starts with) and the try's k."""
    stored = exemplar_sets.get_exemplar_set(settings, set_id)["exemplars"] if set_id else []
    if number is None or number > len(stored):
        number = 1 if stored else NEW
    return stored, exemplar_choices(stored, number), tools_written(stored), try_k_choice(stored)


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
        return gr.skip(), gr.skip(), empty_state(
            "No exemplar set chosen.", "Choose one above, or start a new set, to save this "
            "exemplar in it.")
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
        return gr.skip(), gr.skip(), empty_state(
            "Nothing to delete.", "Choose a stored exemplar above first.")
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
    set (named `name`, else after the QA set) and open it in the editor; the preview then
    ends with another question of `qa_set`, and the name box is emptied for the next draft."""
    if not qa_set:
        return gr.skip(), gr.skip(), empty_state(
            "No QA set to draft from.", "Load a pack or upload questions on the **Data** "
            "page first."), gr.skip(), gr.skip()
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
        return gr.skip(), gr.skip(), error_markdown(str(exc), "Nothing drafted"), gr.skip(), \
            gr.skip()
    dropdown, empty = set_choices(settings, found["id"])
    gaps = (f" {drafted['gaps']} leave the tool call for you to write where it says {GAP}."
            if drafted["gaps"] else "")
    other, _ = qa_sets.questions_other_than(
        settings, qa_sets.find_qa_set(settings, qa_set)["id"],
        [e["question"] for e in found["exemplars"]], 1, exemplar_trials.MAX_SCANNED_ROWS)
    return dropdown, empty, ok_markdown(  # (it escapes the names)
        f"Drafted {found['size']} exemplars from {drafted['scanned']} questions of "
        f"'{qa_set}' into the set '{found['name']}', with the tool's real output inside."
        f"{gaps} They are drafts: read each one below, fix what is flagged, and save it."), \
        other[0]["question"] if other else gr.skip(), ""


TRY_COLUMNS = [("question", "Question"), ("gold", "Gold answer"), ("called", "Called the tool"),
               ("answer", "Its answer"), ("right", "Right")]
TRY_WIDTHS = ["38%", "16%", "11%", "25%", "10%"]
TO_COME = "…"
"""A cell of a question not answered yet."""


def try_k_choice(stored: list[dict] | None, k: int | None = None) -> gr.Radio:
    """The try's k: 1 to the set's size (at most MAX_TRIED_EXEMPLARS); `k` while the set
    still has that many, else the set's size up to 3 (`shown_by_default`)."""
    size = len(stored or [])
    ks = list(range(1, min(size, MAX_TRIED_EXEMPLARS) + 1))
    return gr.Radio(choices=ks, value=k if k in ks else shown_by_default(size) or None)


def _yes_no(flag: bool | None) -> str:
    return TO_COME if flag is None else ("yes" if flag else "no")


def tried_words(tried: ExemplarTry, estimate: bool = True) -> str:
    """What the try asks, from where, and (`estimate`) how long it may take (Markdown, names
    escaped)."""
    where = f"'{tried['qa_set']}'"
    if tried["held_out"]:
        where += f", the held-out split of '{tried['asked_for']}'"
    passed = (f" ({tried['left_out']} passed over: an exemplar's own)" if tried["left_out"]
              else "")
    return markdown_text(
        f"{len(tried['questions'])} questions of {where}{passed}, none of them an exemplar's, "
        f"with {tried['k']} exemplars of '{tried['exemplar_set']}' before each."
        + (f" Time: {tried['estimate']['message']}." if estimate else ""))


def try_exemplars(settings: Settings, actor: Actor, set_id: int | None, qa_set: str | None,
                  corpus: str | None, model: str, layout: str, tools: list[str],
                  k: int | None):
    """Queue the try (`exemplar_trials.try_exemplar_set`, as the API's route): the note says
    which questions, from where, and how long it may take; the table lists the questions.
    What is still to choose is said in plain words (a new studio has neither)."""
    if not set_id or not qa_set:
        missing = ("an exemplar set above (or start one)" if not set_id else
                   "the QA set the questions come from (load one on the **Data** page)")
        return None, empty_state("Nothing to try yet.", f"Choose {missing}."), [], \
            gr.Timer(active=False)
    try:
        tried = exemplar_trials.try_exemplar_set(
            settings, actor, set_id, qa_set=qa_set, corpus=corpus,
            model=(model or "").strip() or None, k=k, layout=layout, tools=tools)
    except UserError as exc:
        return None, error_markdown(str(exc), "Not tried"), [], gr.Timer(active=False)
    return tried, f"*Queued:* {tried_words(tried)}", table(try_rows(tried, []), TRY_COLUMNS), \
        gr.Timer(active=True)


def try_rows(tried: ExemplarTry, answers: list[dict]) -> list[dict]:
    """Each question asked, with its answer (in the order asked) once the try has finished."""
    rows = []
    for i, q in enumerate(tried["questions"]):
        found = answers[i] if i < len(answers) else {}
        rows.append({"question": q["question"], "gold": " / ".join(q["golden_answers"] or []),
                     "called": _yes_no(found.get("called")),
                     "answer": (found.get("answer") or "–") if found else TO_COME,
                     "right": _yes_no(found.get("right"))})
    return rows


def try_report(settings: Settings, tried: ExemplarTry | None) -> tuple[str, list, bool]:
    """The try's progress or outcome in words, the table's rows, and whether more is to
    come."""
    if not tried:
        return "", [], False
    outcome = exemplar_trials.try_outcome(settings, tried["evaluation"]["id"])
    took = duration_words(outcome["seconds"]) if outcome["seconds"] is not None else None
    if outcome["state"] == "queued":
        waiting = f" {markdown_text(outcome['waiting'])}." if outcome["waiting"] else ""
        return f"*Queued.*{waiting} {tried_words(tried)}", try_rows(tried, []), True
    if outcome["state"] == "running":
        so_far = f", {took} so far" if took else ""
        return (f"*Running: {outcome['done']} of {outcome['total']} questions answered{so_far}."
                f"* {tried_words(tried)}"), try_rows(tried, []), True
    if outcome["state"] != "succeeded":
        return error_markdown(outcome["error"] or outcome["state"], "The try did not finish"), \
            try_rows(tried, []), False
    answers = outcome["answers"]
    called = sum(a["called"] for a in answers)
    right = sum(a["right"] for a in answers)
    return (f"**{called} of {len(answers)} called the tool, {right} answered right** (what "
            f"the first training steps will see){f', in {took}' if took else ''}. "
            f"{tried_words(tried, estimate=False)}"), try_rows(tried, answers), False


def build(settings: Settings) -> None:
    gr.Markdown(INTRO)
    stored = gr.State([])
    with gr.Row():
        with gr.Column(scale=1):
            with gr.Row():
                set_pick = gr.Dropdown(label="Exemplar set", choices=[], elem_id="exemplar-set")
                number = gr.Dropdown(label="Exemplar", choices=[], elem_id="exemplar-number")
            sets_empty = gr.Markdown(elem_id="exemplar-sets-empty")
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
                delete_button = gr.Button("Delete exemplar", variant="stop", size="md",
                                          elem_id="delete-exemplar")
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
                    draft_tool = gr.Radio(list(drafted_tools()), value=drafted_tools()[0],
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
            tools = gr.CheckboxGroup(list(TOOLS), value=list(DEFAULT_TOOL_NAMES),
                                     label="Tools", elem_id="preview-tools",
                                     info="The run's tools: the instruction names each one "
                                          "(a set's solutions preselect the tools they call)")
            asked = gr.Textbox(label="Question at the end of the prompt",
                               elem_id="preview-question")
            k = gr.Radio([0], value=0, label="Exemplars shown (k)", elem_id="preview-k")
            note = gr.Markdown(elem_id="preview-note")
            tokens = dataframe(TOKEN_COLUMNS, elem_id="prompt-tokens")
            gr.Markdown("**The prompt the model reads**, turn by turn")
            # no formulas: a prompt's `$$` is text
            turns = gr.Markdown(elem_id="prompt-turns", latex_delimiters=[])
            with gr.Accordion("The raw prompt: the chat template's text, special tokens "
                              "and all", open=False, elem_id="raw-prompt"):
                prompt = gr.Textbox(show_label=False, lines=22, max_lines=40,
                                    interactive=False, elem_id="prompt-text")
    with gr.Accordion(f"Try these exemplars on {TRIED_QUESTIONS} questions", open=False,
                      elem_id="try-exemplars"):
        gr.Markdown(
            "The model above answers questions with k of this set's exemplars before each: "
            "what a run's first steps will see, measured before launch. The questions are "
            "none of the exemplars' own (a model copies the answer of an exemplar it is asked "
            "again): the QA set's held-out split when it has one (`demo-span-heldout` for "
            "`demo-span`), else its other questions.")
        with gr.Row():
            try_qa = gr.Dropdown(label="QA set", choices=[], elem_id="try-qa-set")
            try_corpus = gr.Dropdown(label="Corpus (search)", choices=[], elem_id="try-corpus")
            try_k = gr.Radio([], label="Exemplars before each question (k)", elem_id="try-k")
        try_button = gr.Button("Try them", elem_id="try-button")
        try_note = gr.Markdown(elem_id="try-note")
        try_table = dataframe(TRY_COLUMNS, elem_id="try-table", column_widths=TRY_WIDTHS)
        tried = gr.State(None)
        try_timer = page_timer(2.0)

    editor = [question, solution, answer]
    preview_inputs = [stored, number, *editor, model, layout, tools, asked, k]
    preview_outputs = [tokens, turns, prompt, k, note]

    def show_preview(*values):
        return preview(settings, *values)

    def refresh(selected):
        dropdown, empty = set_choices(settings, selected)
        return dropdown, empty, sample_question(settings)

    on_show(refresh, set_pick, [set_pick, sets_empty, asked])
    set_pick.change(lambda i: open_set(settings, i), set_pick,
                    [stored, number, tools, try_k]).then(fields, [stored, number], editor)
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
    stored.change(try_k_choice, [stored, try_k], try_k)  # a save or a deletion resizes it
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
                     [set_pick, try_qa, try_corpus, model, layout, tools, try_k],
                     [tried, try_note, try_table, try_timer.timer])

    def try_tick(asked_try, page):
        note, rows, pending = try_report(settings, asked_try)
        return note, table(rows, TRY_COLUMNS), try_timer.follow(page, pending)

    try_timer.timer.tick(try_tick, [tried, current().shown], [try_note, try_table,
                                                              try_timer.timer])
    draft_button.click(acting(settings, draft_set_from_data),
                       [draft_qa, draft_tool, draft_corpus, draft_name],
                       [set_pick, sets_empty, message, asked, draft_name])
