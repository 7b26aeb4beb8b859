"""Evaluate: the zero-shot evaluation (k = 0) of a run's checkpoint and of its base model on
chosen QA sets, and the table of base vs trained."""

from __future__ import annotations

import gradio as gr

from frontend import shared
from frontend.components import counted_from_one, picker, plain, signed_in, toast_user_errors
from frontend.run_picker import run_dropdown_update, usable_with_a_run
from studio.escaping import markdown_text
from studio.jobs.lifecycle import ACTIVE_STATES
from studio.services import corpora, evaluations, qa_sets, runs
from studio.services.errors import InvalidInput
from studio.settings import Settings

TITLE = "Evaluate"
HEADERS = ["QA set", "questions", "EM base", "EM trained", "EM change", "SubEM base",
           "SubEM trained", "F1 base", "F1 trained", "tool calls base", "tool calls trained",
           "valid search % base", "valid search % trained", "calls per tool base",
           "calls per tool trained", "tool errors base", "tool errors trained", "requested by",
           "status"]
NO_RUN = ("### Nothing to evaluate yet\nA run can be evaluated once it has written a "
          "checkpoint (every `engine.checkpoint_every` steps and at its end). Launch one on "
          "**Launch**, or follow it on **Live run**.")
LABEL_HEADERS = ["QA set", "what happened", "base", "trained"]
EXAMPLES = 5  # questions shown per label and model
RESULT_CHARS = 80  # of a call's result, in an example
REFRESH_SECONDS = 3
COMING = ("The run evaluates its base and trained models when it ends: this table fills in "
          "then, without a reload.")
PROTOCOL = ("Zero-shot prompt (no exemplars), temperature 0.1, top-3 passages; the defaults "
            "below are the paper's evaluation protocol.")


def _figure(evaluation: dict | None, key: str, percent: bool = True) -> str:
    metrics = (evaluation or {}).get("metrics") or {}
    if key not in metrics:
        return ""
    return f"{100 * metrics[key]:.1f}" if percent else f"{metrics[key]:.2f}"


def tool_figures(evaluation: dict | None) -> str:
    """Calls per question of each tool the evaluation gave the model ("search 1.20 ·
    python 0.50"); empty before it finished (or for one from before tools were counted)."""
    calls = ((evaluation or {}).get("metrics") or {}).get("tool_calls") or {}
    return " · ".join(f"{name} {value:.2f}" for name, value in calls.items())


def tool_errors(evaluation: dict | None) -> str:
    """How many of the model's tool calls failed (a program's exception or limit, an
    expression the calculator refused; stored as `code_errors`); empty when none of the
    evaluation's tools can fail."""
    errors = ((evaluation or {}).get("metrics") or {}).get("code_errors")
    return "" if errors is None else str(errors)


def _status(evaluation: dict | None) -> str:
    if evaluation is None:
        return "not run"
    params, state = evaluation["params"] or {}, evaluation["state"]
    if state == "running":
        return f"running {params.get('done', 0)}/{params.get('total', '?')}"
    if state in ("failed", "interrupted"):  # why (its error's last line), and what to do next
        why = "".join((evaluation["error"] or "").strip().splitlines()[-1:])
        return f"{state}: {why.removeprefix(f'{state}: ')}" if why else state
    if evaluation["waiting"]:
        return f"queued, {evaluation['waiting']}"
    return plain(state)


def question_limit(text: str | None) -> int | None:
    """The "Questions per set" box: empty is every question, else a whole number from 1."""
    return counted_from_one(text, "Questions per set: '{typed}' is not a whole number of 1 or "
                            "more; leave it empty to ask every question")


def zero_notes(pairs: list[dict]) -> str:
    """Why a finished evaluation scored 0 on every measure, one line each (empty if none)."""
    lines = [f"- **{markdown_text(pair['qa_set'])}, {side} model**: EM, SubEM and F1 are 0 "
             f"because {markdown_text(reason)}."
             for pair in pairs for side in ("base", "trained")
             if pair[side] and pair[side]["state"] == "succeeded"
             and (reason := evaluations.zero_score_reason(pair[side]["metrics"]))]
    return "\n".join(lines)


def _owners(pair: dict) -> str:
    """Who queued the evaluations of a pair ("unknown" for a user since removed)."""
    return " · ".join(dict.fromkeys(e["owner"] or "unknown"
                                    for e in (pair["base"], pair["trained"]) if e))


def shown_pairs(pairs: list[dict]) -> list[tuple[str, str, dict]]:
    """(QA set, requested by, pair) per row of the table: each set's pair (the run owner's),
    and under it the requester's own, labelled, where `base_vs_trained` gives one."""
    rows = []
    for pair in pairs:
        rows.append((pair["qa_set"], _owners(pair), pair))
        if pair["yours"]:
            rows.append((pair["qa_set"], f"{pair['yours']['requested_by']} (yours)",
                         pair["yours"]))
    return rows


def table_rows(pairs: list[dict]) -> list[list]:
    rows = []
    for qa_set, requester, pair in shown_pairs(pairs):
        base, trained = pair["base"], pair["trained"]
        change = ""
        if _figure(base, "em") and _figure(trained, "em"):
            change = f"{100 * (trained['metrics']['em'] - base['metrics']['em']):+.1f}"
        questions = ((trained or base)["params"] or {}).get("total", "")
        rows.append([qa_set, questions, _figure(base, "em"), _figure(trained, "em"),
                     change, _figure(base, "subem"), _figure(trained, "subem"),
                     _figure(base, "f1"), _figure(trained, "f1"),
                     _figure(base, "search_calls", percent=False),
                     _figure(trained, "search_calls", percent=False),
                     _figure(base, "valid_search_rate"), _figure(trained, "valid_search_rate"),
                     tool_figures(base), tool_figures(trained), tool_errors(base),
                     tool_errors(trained), requester,
                     f"base {_status(base)} · trained {_status(trained)}"])
    return rows


def _pair_shares(pair: dict) -> dict[str, dict[str, dict]]:
    """Per side, its label shares by label (none for a side without a labelled evaluation)."""
    return {side: {s["label"]: s for s in evaluations.label_shares(pair[side])}
            for side in ("base", "trained")}


def _label_cell(share: dict | None) -> str:
    return f"{share['count']} ({100 * share['share']:.0f}%)" if share else ""


def label_rows(pairs: list[dict]) -> list[list]:
    """Per QA set with a labelled evaluation, one row per label of its tools (base's, then
    any other of trained's): how many questions (and what share) of base and of trained got
    it."""
    rows = []
    for pair in pairs:
        shares = _pair_shares(pair)
        titles = {label: share["title"] for side in shares.values()
                  for label, share in side.items()}
        rows += [[pair["qa_set"], title, _label_cell(shares["base"].get(label)),
                  _label_cell(shares["trained"].get(label))] for label, title in titles.items()]
    return rows


def labels_help(pairs: list[dict]) -> str:
    """The legend of the split: each label its evaluations give, in plain words (those of
    their tools, each once); empty when none has labels."""
    lines = dict.fromkeys(f"- **{share['title']}**: {markdown_text(share['meaning'])}"
                          for pair in pairs for side in _pair_shares(pair).values()
                          for share in side.values())
    if not lines:
        return ""
    return ("Each question gets one label, checked in this order (click a row to see its "
            "questions):\n" + "\n".join(lines))


def _one_line(text: object, most: int | None = None) -> str:
    """`text` on one line, escaped; cut to `most` characters (an ellipsis marks the cut)."""
    line = " ".join(str(text).split())
    if most is not None and len(line) > most:
        line = line[:most] + "…"
    return markdown_text(line)


def call_line(call: dict) -> str:
    """One call of an example: its tool, its input and what came back ("calculator: 3458 +
    6582 - 922 → 10040"), the result cut to `RESULT_CHARS`; the input alone when no result
    was kept."""
    said = f"{_one_line(call['tool'])}: {_one_line(call['input'])}"
    if call["result"] is None:
        return said
    return f"{said} → {_one_line(call['result'], RESULT_CHARS)}"


def examples_markdown(settings: Settings, pair: dict, side: str, label: str,
                      title: str) -> str:
    """The first questions of one side's evaluation with `label` (shown as `title`): question,
    gold answers, the model's answer and each call with its result, every one escaped."""
    evaluation = pair[side]
    head = f"#### {side.capitalize()} model: {title}"
    shares = evaluations.label_shares(evaluation)
    if not shares:
        return f"{head}\nNo finished evaluation with labels."
    if label not in {s["label"] for s in shares}:
        return f"{head}\nIts tools give no such label."
    questions = evaluations.labelled_questions(settings, evaluation["id"], label, EXAMPLES)
    if not questions:
        return f"{head}\nNo question got this label."
    items = [f"- **Question:** {_one_line(q['question'])}  \n"
             f"  **Gold answer:** {' · '.join(_one_line(g) for g in q['golden_answers'])}  \n"
             f"  **Model's answer:** "
             f"{'*none*' if q['prediction'] is None else _one_line(q['prediction'])}  \n"
             f"  **Calls:** {' · '.join(call_line(c) for c in q['calls']) or '*none*'}"
             for q in questions]
    count = next(s["count"] for s in shares if s["label"] == label)
    return f"{head} ({len(questions)} of {count})\n" + "\n".join(items)


def moving(pairs: list[dict]) -> bool:
    """Whether an evaluation in the table is queued or running (its row will change)."""
    return any(e and e["state"] in ACTIVE_STATES
               for _, _, pair in shown_pairs(pairs) for e in (pair["base"], pair["trained"]))


def build(settings: Settings) -> None:
    gr.Markdown("## Evaluate\nThe run's latest checkpoint and the model it started from, on the "
                "same questions: exact match (EM), substring EM and F1, in %.")
    empty = gr.Markdown(NO_RUN, visible=False, elem_id="evaluate-empty")
    with gr.Row():
        run = gr.Dropdown(label="Run (with a checkpoint)", choices=[], elem_id="evaluate-run")
        base_model = gr.Textbox(label="Base model", elem_id="evaluate-base",
                                info="What the run started from; any model name or folder")
    with gr.Row():
        sets = gr.Dropdown(label="QA sets", multiselect=True, choices=[],
                           elem_id="evaluate-sets")
        corpus = gr.Dropdown(label="Corpus the model searches", choices=[],
                             elem_id="evaluate-corpus")
        limit = gr.Textbox(label="Questions per set", placeholder="all",
                           info="Empty: every question of each set", elem_id="evaluate-limit")
        queue = gr.Radio(["cpu", "gpu"], value="cpu", label="Queue")
    with gr.Accordion("Protocol", open=False):
        gr.Markdown(PROTOCOL)
        with gr.Row():
            turn_tokens = gr.Number(label="New tokens per turn", value=512, precision=0,
                                    minimum=1, elem_id="evaluate-turn-tokens")
            max_turns = gr.Number(label="Tool calls at most", value=6, precision=0, minimum=0,
                                  elem_id="evaluate-max-turns")
    with gr.Row():  # usable once a run is chosen (`NO_RUN` says why there is none)
        start = gr.Button("Evaluate base and trained", variant="primary", interactive=False,
                          elem_id="evaluate-start")
        stop = gr.Button("Cancel running evaluations", variant="stop", interactive=False,
                         elem_id="evaluate-stop")
    message = gr.Markdown(elem_id="evaluate-message")
    table = gr.Dataframe(headers=HEADERS, interactive=False, wrap=True, elem_id="evaluate-table")
    notes = gr.Markdown(elem_id="evaluate-notes")
    gr.Markdown("### Where the answers went wrong")
    labels = gr.Dataframe(headers=LABEL_HEADERS, interactive=False, wrap=True,
                          elem_id="evaluate-labels")
    legend = gr.Markdown(elem_id="evaluate-labels-help")
    with gr.Row():
        examples = {side: gr.Markdown(elem_id=f"evaluate-examples-{side}")
                    for side in ("base", "trained")}
    sent = gr.State([])  # the rows last sent, so an unchanged table is not re-sent
    common = shared.current()
    timer = shared.page_timer(REFRESH_SECONDS)

    def has_checkpoint(r: dict) -> bool:
        return bool(r["checkpoint_dir"])

    def results(request: gr.Request, run_id, model=None
                ) -> tuple[list, list, str, list, str, bool]:
        """The table as the signed-in user sees it (twice: shown, and kept to compare), the
        notes (why a score is 0, or that the run's own evaluations are still to come), the
        split by failure label and its legend, and whether the table will still change (an
        evaluation in it moves, or the run's are to come)."""
        pairs = evaluations.base_vs_trained(settings, int(run_id), model or None,
                                            signed_in(settings, request))
        rows = table_rows(pairs)
        to_come = evaluations.evaluations_to_come(settings, int(run_id))
        notes_now = "\n\n".join(filter(None, (COMING * to_come, zero_notes(pairs))))
        return (rows, rows, notes_now, label_rows(pairs), labels_help(pairs),
                moving(pairs) or to_come)

    def table_now(request: gr.Request, run_id, model, previous):
        """`results`, with the tables and notes skipped when the rows did not change."""
        if run_id is None:
            return gr.skip(), previous, gr.skip(), gr.skip(), gr.skip(), False
        rows, kept, notes_now, split, help_now, live = results(request, run_id, model)
        if rows == previous:
            return gr.skip(), previous, gr.skip(), gr.skip(), gr.skip(), live
        return rows, kept, notes_now, split, help_now, live

    def refresh(current, focus, model, previous, request: gr.Request):
        """Fresh choices; with none chosen (a new tab, a reload) the run in focus, else the
        one evaluated last, else the newest, so its results show without a pick. And the
        chosen run's results as they are now: only when the page's tab is opened (on load
        none is chosen yet), so its timer is this page's to start."""
        update = run_dropdown_update(settings, current, only=has_checkpoint)
        ids = [run_id for _, run_id in update["choices"]]
        if current is None and ids:
            update["value"] = next((r for r in (focus, evaluations.latest_evaluated_run(settings))
                                    if r in ids), ids[0])
        *now, live = table_now(request, current, model, previous)
        return update, gr.update(visible=not update["choices"]), \
            gr.update(choices=[q["name"] for q in qa_sets.list_qa_sets(settings)]), \
            picker([c["name"] for c in corpora.list_corpora(settings)
                    if c["status"] == "ready"]), *now, timer.start(timer.page, live)

    filled = [table, sent, notes, labels, legend]  # what `results` fills, in its order
    shared.on_show(refresh, inputs=[run, common.focus_run, base_model, sent],
                   outputs=[run, empty, sets, corpus, *filled, timer.timer],
                   show_progress="hidden")

    @toast_user_errors
    def pick_run(page, run_id, request: gr.Request):
        if run_id is None:
            return gr.skip(), gr.skip(), gr.skip(), [], [], "", [], "", "", "", gr.skip()
        config = runs.get_run(settings, int(run_id))["config"]
        data = config["data"]
        *now, live = results(request, run_id)
        return (config["model"], data["eval"] or [data["train"]], data["corpus"], *now, "",
                "", timer.start(page, live))

    run.change(pick_run, inputs=[common.shown, run],
               outputs=[base_model, sets, corpus, *filled, examples["base"],
                        examples["trained"], timer.timer])
    usable_with_a_run(run, [start, stop])

    @toast_user_errors
    def show_examples(run_id, model, event: gr.SelectData):
        """A row of the split clicked: that QA set's questions with that label, base beside
        trained."""
        if run_id is None:
            return gr.skip(), gr.skip()
        qa_set, title = event.row_value[:2]
        pair = next((p for p in evaluations.base_vs_trained(settings, int(run_id), model or None)
                     if p["qa_set"] == qa_set), None)
        label = next((key for side in _pair_shares(pair).values()
                      for key, share in side.items() if share["title"] == title),
                     None) if pair else None
        if label is None:  # the table changed under the click
            return gr.skip(), gr.skip()
        return tuple(examples_markdown(settings, pair, side, label, title) for side in examples)

    labels.select(show_examples, inputs=[run, base_model],
                  outputs=[examples["base"], examples["trained"]])

    @toast_user_errors
    def launch(run_id, model, set_names, corpus_name, questions, on_queue, tokens, turns,
               request: gr.Request):
        if run_id is None:
            raise InvalidInput("Choose a run first: its latest checkpoint is what gets evaluated.")
        created = evaluations.evaluate_base_and_trained(
            settings, signed_in(settings, request), int(run_id), set_names or [],
            base_model=(model or "").strip() or None,
            corpus=corpus_name, limit=question_limit(questions),
            protocol={"max_turn_tokens": int(tokens), "max_turns": int(turns)}, queue=on_queue)
        return (f"Queued {len(created)} evaluations on the **{on_queue}** queue; the table "
                "fills in as they finish.", *results(request, run_id, model)[:-1],
                gr.Timer(active=True))

    start.click(launch, inputs=[run, base_model, sets, corpus, limit, queue, turn_tokens,
                                max_turns],
                outputs=[message, *filled, timer.timer])

    @toast_user_errors
    def cancel(run_id, model, request: gr.Request):
        if run_id is None:
            raise InvalidInput("Choose a run first.")
        count = evaluations.cancel_base_vs_trained(settings, signed_in(settings, request),
                                                   int(run_id), model or None)
        return (f"Cancelled {count} evaluation{'s' * (count != 1)}." if count
                else "No evaluation of this run is queued or running."), \
            *results(request, run_id, model)[:-1]

    stop.click(cancel, inputs=[run, base_model], outputs=[message, *filled])

    def tick(page, run_id, model, previous, request: gr.Request):
        *now, live = table_now(request, run_id, model, previous)
        return *now, timer.follow(page, live)

    timer.timer.tick(tick, inputs=[common.shown, run, base_model, sent],
                     outputs=[*filled, timer.timer], show_progress="hidden")
