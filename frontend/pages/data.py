"""The Data page: upload corpora, QA sets and exemplar sets, preview them, try a search,
and run the data doctor (can the corpus answer the questions; do the exemplars show passages
it returns) before a launch.

Every upload goes through the same service as the REST API, so a bad file is
refused with its line and what to fix, and nothing is stored. A corpus's
BM25 index is built by a worker; the table polls its row (rows read) while a
build is waiting or running.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from frontend.components import (
    acting,
    choices,
    dataframe,
    empty_state,
    error_markdown,
    ok_markdown,
    picker,
    plain,
    table,
    toast_user_errors,
    uploaded,
)
from frontend.shared import current, on_show, page_timer
from studio.escaping import markdown_text
from studio.ingest import QA_FORMATS
from studio.services import corpora, data_doctor, data_usage, exemplar_sets, presets, qa_sets
from studio.services.access import Actor
from studio.services.demo import load_calc_pack, load_demo_pack, load_math_pack
from studio.services.errors import UserError
from studio.settings import Settings

TITLE = "Data"

INTRO = """
## Data
The model learns to answer questions by searching **a corpus** (your documents).
It trains on **a QA set** (questions with their answers) and starts from a few
**exemplars** (worked examples of searching), which the curriculum then removes.
New here? Click **Load the demo pack**: a small made-up corpus, 196 questions to
train on, 60 held-out questions to evaluate on (the QA set `demo-heldout`), 120
questions answered by a date, a count or a name (`demo-span` and `demo-span-heldout`) and
3 exemplars, enough to launch a first run. **Load the math pack** stores word problems
with numeric answers for the python tool (QA sets `math` and `math-heldout`, exemplars
that run code; no corpus). **Load the arithmetic pack** stores sums and short word problems
for the calculator tool (QA sets `calc` and `calc-heldout`, exemplars that call the
calculator; no corpus).
"""

ADD_WORDS = """### 1. Add data
Load a ready-made pack, or upload your own: a corpus for the model to search, a QA set to train
and evaluate on, and exemplars to start from."""
CHECK_WORDS = """### 2. Check it
Search the corpus as the model will, read what you uploaded, and let the data doctor say
whether the corpus can answer the questions."""
USE_WORDS = """### 3. Use it
What is stored, with each corpus's search index (a run can use a corpus once its index is
done), and the runs that use each set. Launch a run on them on the **Launch** page."""

CORPUS_COLUMNS = [("id", "#"), ("name", "Name"), ("source_filename", "File"),
                  ("status", "Status"), ("num_documents", "Documents"),
                  ("num_passages", "Passages"), ("index", "Index build")]
QA_COLUMNS = [("id", "#"), ("name", "Name"), ("purpose", "Purpose"), ("num_rows", "Questions"),
              ("format", "Format"), ("source_filename", "File"), ("notes", "Notes")]
EXEMPLAR_COLUMNS = [("id", "#"), ("name", "Name"), ("size", "Exemplars"), ("errors", "Errors"),
                    ("warnings", "Warnings"), ("source_filename", "File")]
QA_ROW_COLUMNS = [("row", "Row"), ("id", "Id"), ("question", "Question"),
                  ("answers", "Answers")]
USAGE_COLUMNS = [("kind", "Kind"), ("name", "Name"), ("runs", "Runs that trained on it"),
                 ("presets", "Ready-made runs that use it")]
HIT_COLUMNS = [("rank", "Doc"), ("title", "Title"), ("score", "Score"), ("id", "Passage id")]
WORST_COLUMNS = [("id", "Id"), ("question", "Question"), ("answers", "Answers"),
                 ("hops_found", "Hops found"), ("retrieved", "Passages it finds")]
PREVIEW_ROWS = 20
BUSY = ("pending", "indexing")
# A file box's label sits above the drop area: floating, a long one hid the upload icon.
CSS = ".upload-file label[data-testid='block-label'] { position: static; }"


def index_progress(corpus: dict) -> str:
    """The index build in words: rows done while it runs, the reason when it failed."""
    status, progress = plain(corpus["status"]), corpus["progress"]
    if status == "ready":
        return f"done: {corpus['num_passages']} passages"
    if status == "failed":
        return f"failed: {corpus['error']}"
    if status == "pending":
        return corpus["waiting"] or "waiting for a worker"
    return (f"{progress['rows_read']} / {corpus['num_documents']} rows done "
            f"({progress['fraction']:.0%}), {progress['passages_indexed']} passages indexed")


def qa_notes(qa_set: dict) -> str:
    report = qa_set["report"] or {}
    notes = [f"{report[key]} {words}" for key, words in (
        ("empty_answer_count", "without an answer"),
        ("duplicate_question_count", "repeated questions"),
        ("unanswerable_count", "marked unanswerable")) if report.get(key)]
    if report.get("split_of"):
        notes.append(f"split of '{report['split_of']}' (seed {report['seed']})")
    return ", ".join(notes)


def _name(name: str, path: str | None) -> str:
    """The name typed, or the uploaded file's name without its suffix."""
    return name.strip() or (Path(path).stem if path else "")


# --- the three lists --------------------------------------------------------------------


def list_view(rows: list[dict], columns, label, nothing: tuple[str, str]):
    """A kind's table, its empty state (what is missing, what to do) and its picker."""
    empty = "" if rows else empty_state(*nothing)
    return table(rows, columns), empty, picker(choices(rows, label, value="id"))


def corpora_view(settings: Settings):
    """The corpora, and whether an index build waits or runs (the table then follows it)."""
    rows = [{**row, "index": index_progress(row)} for row in corpora.list_corpora(settings)]
    busy = any(plain(row["status"]) in BUSY for row in rows)
    return (*list_view(rows, CORPUS_COLUMNS, lambda c: f"{c['name']} ({plain(c['status'])})",
                       ("No corpus yet.", "Upload your documents under *Add data* above, or "
                        "click **Load the demo pack**.")),
            busy)


def qa_view(settings: Settings):
    rows = [{**row, "notes": qa_notes(row)} for row in qa_sets.list_qa_sets(settings)]
    return list_view(rows, QA_COLUMNS, lambda q: q["name"],
                     ("No QA set yet.", "Upload questions with their answers under *Add data* "
                      "above (JSONL, JSON or CSV)."))


def exemplar_view(settings: Settings):
    return list_view(exemplar_sets.list_exemplar_sets(settings), EXEMPLAR_COLUMNS,
                     lambda e: e["name"], ("No exemplar set yet.", "Upload worked examples "
                                           "under *Add data* above, or write them on the "
                                           "**Exemplars** page."))


def usage_view(settings: Settings) -> list[list]:
    """Where each data set is used (studio.services.data_usage), in words."""
    return table([{**row, "runs": ", ".join(f"#{run['id']} {run['name']} ({run['state']})"
                                            for run in row["runs"]) or "none yet",
                   "presets": ", ".join(row["presets"]) or "none"}
                  for row in data_usage.data_usage(settings)], USAGE_COLUMNS)


# --- uploads ----------------------------------------------------------------------------


def upload_corpus(settings: Settings, actor: Actor, path: str | None, name: str, backend: str,
                  split_on_blank_lines: bool) -> str:
    try:
        with uploaded(settings, actor, path) as (stream, filename):
            corpus = corpora.create_corpus(settings, actor, stream, filename, _name(name, path),
                                           backend=backend,
                                           split_on_blank_lines=split_on_blank_lines)
    except UserError as exc:
        return error_markdown(str(exc), "The corpus was not stored")
    return ok_markdown(f"Stored corpus '{corpus['name']}' ({corpus['num_documents']} "
                       "documents); its search index is being built, see *Use it* below.")


def upload_qa(settings: Settings, actor: Actor, path: str | None, name: str, purpose: str,
              fmt: str) -> str:
    try:
        with uploaded(settings, actor, path) as (stream, filename):
            qa_set = qa_sets.create_qa_set(settings, actor, stream, filename, _name(name, path),
                                           purpose=purpose, fmt=None if fmt == "auto" else fmt)
    except UserError as exc:
        return error_markdown(str(exc), "The QA set was not stored")
    notes = qa_notes(qa_set)
    return ok_markdown(f"Stored QA set '{qa_set['name']}' ({qa_set['num_rows']} questions, "
                       f"{qa_set['format']})") + (f"\n\nNote: {markdown_text(notes)}."
                                                  if notes else "")


def upload_exemplars(settings: Settings, actor: Actor, path: str | None, name: str) -> str:
    try:
        with uploaded(settings, actor, path) as (stream, filename):
            found = exemplar_sets.upload_exemplar_set(settings, actor, stream, filename,
                                                      _name(name, path))
    except UserError as exc:
        return error_markdown(str(exc), "The exemplar set was not stored")
    message = ok_markdown(f"Stored exemplar set '{found['name']}' ({found['size']} exemplars)")
    if found["errors"] or found["warnings"]:
        message += (f"\n\nIt has {found['errors']} errors and {found['warnings']} warnings: "
                    "see the preview, and fix them on the **Exemplars** page.")
    return message


def _load_pack(load, settings: Settings, actor: Actor, title: str, next_words: str) -> str:
    """Store a pack with `load` (a service) and say what is stored, then what to do next."""
    try:
        pack = load(settings, actor)
    except UserError as exc:
        return error_markdown(str(exc), f"The {title.lower()} was not loaded")
    qa, heldout, ex = pack["qa_set"], pack["heldout_qa_set"], pack["exemplar_set"]
    corpus = pack.get("corpus")
    stored = [f"corpus '{corpus['name']}' ({corpus['num_documents']} documents)"] \
        if corpus else []
    stored += [f"QA set '{qa['name']}' ({qa['num_rows']} questions to train on)",
               f"QA set '{heldout['name']}' ({heldout['num_rows']} held-out questions to "
               "evaluate on)"]
    if "span_qa_set" in pack:
        spans, held_spans = pack["span_qa_set"], pack["span_heldout_qa_set"]
        stored += [f"QA sets '{spans['name']}' and '{held_spans['name']}' "
                   f"({spans['num_rows']} and {held_spans['num_rows']} questions answered by a "
                   "date, a count or a name)"]
    stored += [f"exemplar set '{ex['name']}' ({ex['size']} exemplars)"]
    return ok_markdown(f"{title} loaded: {', '.join(stored)}") + f"\n\nNext: {next_words}"


def load_demo(settings: Settings, actor: Actor) -> str:
    return _load_pack(load_demo_pack, settings, actor, "Demo pack",
                      "when the corpus index is done, try a search below; then design the "
                      "curriculum and launch a run.")


def ready_made_next(preset: str, tool_words: str) -> str:
    """What to do after loading a tool pack: launch its ready-made run, set up for it."""
    return (f"choose the ready-made run `{preset}` at the top of the **Launch** page and "
            f"launch it: it trains with {tool_words} and compares answers as numbers, all set "
            "for you.")


def load_math(settings: Settings, actor: Actor) -> str:
    return _load_pack(load_math_pack, settings, actor, "Math pack",
                      ready_made_next(presets.MATH, "the python tool (its exemplars run "
                                                    "Python)"))


def load_calc(settings: Settings, actor: Actor) -> str:
    return _load_pack(load_calc_pack, settings, actor, "Arithmetic pack",
                      ready_made_next(presets.CALCULATOR, "the calculator tool (its exemplars "
                                                          "call `<calc>`)"))


# --- previews ---------------------------------------------------------------------------


@toast_user_errors
def search(settings: Settings, corpus_id: int | None, query: str, k: float):
    if corpus_id is None:
        raise UserError("corpus: choose a corpus to search first")
    result = corpora.search(settings, corpus_id, query, int(k))
    hits = [{"rank": i, **hit, "score": round(hit["score"], 3)}
            for i, hit in enumerate(result["hits"], 1)]
    return result["tool_text"].strip("\n"), table(hits, HIT_COLUMNS)


@toast_user_errors
def preview_qa(settings: Settings, qa_set_id: int | None):
    if qa_set_id is None:
        return [], ""
    page = qa_sets.qa_rows(settings, qa_set_id, 0, PREVIEW_ROWS)
    rows = [{**row, "answers": " | ".join(row["golden_answers"])} for row in page["rows"]]
    shown = f"The first {len(rows)} of {page['total']} questions."
    notes = qa_notes(qa_sets.get_qa_set(settings, qa_set_id))
    return table(rows, QA_ROW_COLUMNS), shown + (f" Note: {markdown_text(notes)}."
                                                 if notes else "")


def exemplar_markdown(found: dict) -> str:
    if not found["exemplars"]:
        return empty_state("This set is empty.", "Add exemplars on the **Exemplars** page.")
    parts = []
    for item in found["exemplars"]:
        answer = f" (answer: {item['answer']})" if item["answer"] else ""
        findings = "\n".join(f"  - {'✗' if f['severity'] == 'error' else '⚠'} "
                             f"{f['severity']}: {markdown_text(f['message'])}"
                             for f in item["findings"])
        parts.append(f"**{item['number']}.** {markdown_text(item['question'] + answer)}\n"
                     + (findings or "  - ✓ no problem found"))
    return "\n\n".join(parts)


@toast_user_errors
def preview_exemplars(settings: Settings, set_id: int | None) -> str:
    if set_id is None:
        return ""
    return exemplar_markdown(exemplar_sets.get_exemplar_set(settings, set_id))


PROGRESS = gr.Progress()  # Gradio hands each call of a handler with this default its own bar

# --- the data doctor ----------------------------------------------------------------------

DOCTOR_INTRO = """#### Data doctor: check before you launch
Searches each question of a QA set on a corpus, the question itself as the query, and counts
how many find their answer in the passages returned (matched as the reward matches answers);
and runs each exemplar's searches on the corpus to see whether it returns what the exemplar
shows. What each figure means: docs/data-doctor.md."""


def doctor_choices(settings: Settings):
    """The doctor's three pickers: the corpora, the QA sets, the exemplar sets."""
    return (picker(choices(corpora.list_corpora(settings), lambda c: c["name"], value="id")),
            picker(choices(qa_sets.list_qa_sets(settings), lambda q: q["name"], value="id")),
            picker(choices(exemplar_sets.list_exemplar_sets(settings), lambda e: e["name"],
                           value="id")))


def replay_markdown(report: dict) -> str:
    """The exemplar replay: its summary, then a bullet per exemplar (✓ or ⚠ and why)."""
    head, *items = data_doctor.replay_lines(report)
    marks = ["✓" if not item["findings"] else "⚠" for item in report["exemplars"]]
    return "\n".join([markdown_text(head), ""] + [f"- {mark} {markdown_text(line)}"
                                                  for mark, line in zip(marks, items,
                                                                        strict=True)])


@toast_user_errors
def run_doctor(settings: Settings, corpus_id: int | None, qa_set_id: int | None,
               exemplar_set_id: int | None, k: float, on_progress=None):
    """The doctor's figures in words, its worst questions, and the exemplar replay."""
    if corpus_id is None:
        raise UserError("corpus: choose a corpus whose index is ready")
    if qa_set_id is None and exemplar_set_id is None:
        raise UserError("QA set: choose a QA set, an exemplar set, or both")
    summary, worst, replay = "", [], ""
    if qa_set_id is not None:
        report = data_doctor.reachability(settings, corpus_id, qa_set_id, k=int(k),
                                          on_progress=on_progress)
        summary = "\n\n".join(markdown_text(line)
                               for line in data_doctor.reachability_lines(report))
        worst = table([{**w, "answers": " | ".join(w["golden_answers"]),
                        "retrieved": " | ".join(w["retrieved"])} for w in report["worst"]],
                      WORST_COLUMNS)
    if exemplar_set_id is not None:
        replay = replay_markdown(data_doctor.exemplar_replay(settings, corpus_id,
                                                             exemplar_set_id, k=int(k)))
    return summary, worst, replay


# --- layout -----------------------------------------------------------------------------


def listing(key: str, heading: str, columns) -> tuple[gr.Markdown, gr.Dataframe]:
    """A kind of data's heading, empty state (`#{key}-empty`) and table (`#{key}-table`)."""
    gr.Markdown(f"#### {heading}")
    return gr.Markdown(elem_id=f"{key}-empty"), dataframe(columns, elem_id=f"{key}-table")


@dataclass
class UploadForm:
    file: gr.File
    name: gr.Textbox
    button: gr.Button | None = None
    message: gr.Markdown | None = None


@contextmanager
def upload_form(key: str, file_label: str, what: str) -> Iterator[UploadForm]:
    """A column: file and name, the caller's own fields, then the button and its message.

    Element ids: `{key}-file`, `upload-{key}`, `{key}-message`.
    """
    with gr.Column():
        form = UploadForm(gr.File(label=file_label, height=120, elem_id=f"{key}-file",
                                  elem_classes=["upload-file"]),
                          gr.Textbox(label="Name", placeholder="default: the file's name"))
        yield form
        form.button = gr.Button(f"Upload {what}", elem_id=f"upload-{key}")
        form.message = gr.Markdown(elem_id=f"{key}-message")


def build(settings: Settings) -> None:
    gr.Markdown(INTRO)
    with gr.Column(elem_id="data-add"):
        gr.Markdown(ADD_WORDS)
        with gr.Row():
            demo_button = gr.Button("Load the demo pack", variant="primary", scale=0,
                                    min_width=220, elem_id="load-demo")
            math_button = gr.Button("Load the math pack", scale=0, min_width=220,
                                    elem_id="load-math")
            calc_button = gr.Button("Load the arithmetic pack", scale=0, min_width=220,
                                    elem_id="load-calc")
            demo_message = gr.Markdown(elem_id="demo-message")
        with gr.Row():
            with upload_form("corpus", "Corpus: your documents (JSONL, CSV/TSV, Parquet, "
                             "txt/md, zip)", "corpus") as corpus:
                backend = gr.Dropdown(list(corpora.BACKENDS), value=corpora.BACKENDS[0],
                                      label="BM25 library")
                split = gr.Checkbox(label="Plain text: a blank line starts a new document")
            with upload_form("qa", "QA set: questions with their answers (FlashRAG JSONL, "
                             "HotpotQA or MuSiQue JSON, CSV)", "QA set") as qa:
                purpose = gr.Radio(list(qa_sets.PURPOSES), value="train", label="Used for")
                fmt = gr.Dropdown(["auto", *QA_FORMATS], value="auto", label="Format")
            with upload_form("exemplar", "Exemplars: worked examples (JSONL or "
                             "'===== Example N =====' text)", "exemplar set") as ex:
                pass

    with gr.Column(elem_id="data-check"):
        gr.Markdown(CHECK_WORDS)
        with gr.Row():
            with gr.Column():
                gr.Markdown("#### Try a search\nExactly what the model reads after it "
                            "searches.")
                search_corpus = gr.Dropdown(label="Corpus", choices=[], elem_id="search-corpus")
                query = gr.Textbox(label="Query", placeholder="e.g. lighthouse first lit",
                                   elem_id="search-query")
                k = gr.Slider(1, 10, value=3, step=1, label="Passages returned (top-k)")
                search_button = gr.Button("Search", elem_id="search-button")
                tool_text = gr.Textbox(label="What the model reads", lines=8,
                                       interactive=False, elem_id="search-result")
                hits = dataframe(HIT_COLUMNS)
            with gr.Column():
                gr.Markdown("#### Read an exemplar set\nEach worked example, and what to fix "
                            "in it.")
                ex_pick = gr.Dropdown(label="Preview exemplar set", choices=[],
                                      elem_id="exemplar-pick")
                ex_preview = gr.Markdown(elem_id="exemplar-preview")
        gr.Markdown("#### Read a QA set")
        qa_pick = gr.Dropdown(label="Preview QA set", choices=[], elem_id="qa-pick")
        qa_shown = gr.Markdown()
        qa_rows = dataframe(QA_ROW_COLUMNS, column_widths=["12%", "18%", "45%", "25%"],
                            elem_id="qa-rows")
        gr.Markdown(DOCTOR_INTRO)
        with gr.Row():
            doctor_corpus = gr.Dropdown(label="Corpus", choices=[], elem_id="doctor-corpus")
            doctor_qa = gr.Dropdown(label="QA set", choices=[], elem_id="doctor-qa")
            doctor_ex = gr.Dropdown(label="Exemplar set", choices=[],
                                    elem_id="doctor-exemplars")
            doctor_k = gr.Slider(1, 10, value=3, step=1, label="Passages per search (the "
                                 "run's top-k)")
        doctor_button = gr.Button("Check the data", elem_id="doctor-button")
        doctor_summary = gr.Markdown(elem_id="doctor-summary")
        gr.Markdown("**Unreachable questions**, fewest supporting passages found first:")
        doctor_worst = dataframe(WORST_COLUMNS, elem_id="doctor-worst")
        doctor_replay = gr.Markdown(elem_id="doctor-replay")

    with gr.Column(elem_id="data-use"):
        gr.Markdown(USE_WORDS)
        corpus_empty, corpus_table = listing("corpus", "Corpora: the documents the model "
                                             "searches, and their search index",
                                             CORPUS_COLUMNS)
        qa_empty, qa_table = listing("qa", "QA sets: questions with their answers",
                                     QA_COLUMNS)
        ex_empty, ex_table = listing("exemplar", "Exemplar sets: worked examples shown in the "
                                     "prompt", EXEMPLAR_COLUMNS)
        gr.Markdown("#### Where each is used\nThe runs that trained on it (a run keeps the "
                    "data it started with) and the ready-made runs on the **Launch** page "
                    "that use it.")
        usage_table = dataframe(USAGE_COLUMNS, column_widths=["12%", "18%", "45%", "25%"],
                                elem_id="data-usage")
    index_timer = page_timer(1.0)
    doctor_pickers = [doctor_corpus, doctor_qa, doctor_ex]

    def check_data(corpus_id, qa_set_id, exemplar_set_id, k, progress=PROGRESS):
        """The doctor, with a progress bar while it searches a large set."""
        def searched(done: int, total: int) -> None:
            progress(done / total, desc=f"searched {done} of {total} questions")
        return run_doctor(settings, corpus_id, qa_set_id, exemplar_set_id, k, searched)

    corpus_outputs = [corpus_table, corpus_empty, search_corpus, index_timer.timer]
    qa_outputs = [qa_table, qa_empty, qa_pick]
    ex_outputs = [ex_table, ex_empty, ex_pick]
    shown = [current().shown]  # the page shown, for the index timer

    def corpora_now(page):
        """On show or after an action: the corpora, and the timer started if a build runs."""
        *view, busy = corpora_view(settings)
        return *view, index_timer.start(page, busy)

    def corpora_tick(page):
        *view, busy = corpora_view(settings)
        return *view, index_timer.follow(page, busy)

    def everything(page):
        return (*corpora_now(page), *qa_view(settings), *exemplar_view(settings),
                *across_now())

    def across_now():
        """What any upload changes besides its own list: the doctor's pickers, and where
        each data set is used."""
        return *doctor_choices(settings), usage_view(settings)

    across = [*doctor_pickers, usage_table]
    all_outputs = corpus_outputs + qa_outputs + ex_outputs + across
    on_show(everything, None, all_outputs, with_page=True)
    index_timer.timer.tick(corpora_tick, shown, corpus_outputs)
    for button, load in ((demo_button, load_demo), (math_button, load_math),
                         (calc_button, load_calc)):
        button.click(acting(settings, load), outputs=demo_message).then(
            everything, shown, all_outputs)
    corpus.button.click(acting(settings, upload_corpus),
                        [corpus.file, corpus.name, backend, split], corpus.message).then(
        corpora_now, shown, corpus_outputs).then(across_now, outputs=across)
    qa.button.click(acting(settings, upload_qa), [qa.file, qa.name, purpose, fmt],
                    qa.message).then(lambda: qa_view(settings), outputs=qa_outputs).then(
        across_now, outputs=across)
    ex.button.click(acting(settings, upload_exemplars), [ex.file, ex.name],
                    ex.message).then(lambda: exemplar_view(settings), outputs=ex_outputs).then(
        across_now, outputs=across)
    gr.on([search_button.click, query.submit], lambda *a: search(settings, *a),
          [search_corpus, query, k], [tool_text, hits])
    qa_pick.change(lambda i: preview_qa(settings, i), qa_pick, [qa_rows, qa_shown])
    ex_pick.change(lambda i: preview_exemplars(settings, i), ex_pick, ex_preview)
    doctor_button.click(check_data, [doctor_corpus, doctor_qa, doctor_ex, doctor_k],
                        [doctor_summary, doctor_worst, doctor_replay])
