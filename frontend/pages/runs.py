"""Runs: every training run with its state, progress and place in the queue; cancel, resume or
delete one."""

from __future__ import annotations

import gradio as gr

from frontend import shared
from frontend.components import plain, signed_in, toast_user_errors
from frontend.pages import live_run
from frontend.run_picker import run_dropdown_update, usable_with_a_run, utc_minute
from studio.escaping import markdown_text
from studio.services import runs
from studio.services.errors import InvalidInput
from studio.settings import Settings

TITLE = "Runs"
HEADERS = ["id", "name", "state", "progress", "queue", "attempt", "created", "finished",
           "error"]
EMPTY = (
    "### No runs yet\n"
    "1. On **Data**, load the demo pack (or upload a corpus, a QA set and exemplars).\n"
    "2. On **Launch**, pick the model and the curriculum and press *Launch*.\n\n"
    "Runs then appear here with their state and progress. (From a terminal: "
    "`studio run launch run.yaml`.)"
)
REFRESH_SECONDS = 3
MOVING = ("queued", "running")  # a run in these states changes the table by itself


def progress_text(run: dict) -> str:
    done, total = run["current_step"], run["total_steps"]
    percent = f" ({done / total:.0%})" if total else ""
    return f"{done} / {total} steps{percent}"


def queue_text(run: dict) -> str:
    position = run.get("queue_position")
    return f"{run['queue']}: #{position} in line" if position else run["queue"]


def table_rows(all_runs: list[dict]) -> list[list]:
    rows = []
    for run in all_runs:
        error = (run["error"] or "").strip().splitlines()
        rows.append([run["id"], run["name"], plain(run["state"]), progress_text(run),
                     queue_text(run), run.get("attempt", 1), utc_minute(run["created_at"]),
                     utc_minute(run["finished_at"]), error[-1][:160] if error else ""])
    return rows


def chosen_id(run_id) -> int:
    if run_id is None:
        raise InvalidInput("Choose a run first (select its row in the table).")
    return int(run_id)


def build(settings: Settings) -> None:
    gr.Markdown("## Runs\nEvery training run, newest first. Select a row to act on it; "
                "closing the browser never stops a run.")
    empty = gr.Markdown(EMPTY, visible=False, elem_id="runs-empty")
    table = gr.Dataframe(headers=HEADERS, interactive=False, elem_id="runs-table", wrap=True,
                         column_widths=["5%", "15%", "9%", "14%", "11%", "7%", "13%", "13%",
                                        "13%"])
    sent = gr.State(None)  # the rows last sent, so an unchanged table is not re-sent
    with gr.Row(equal_height=True):  # the buttons act on the chosen run: usable once one is
        chosen = gr.Dropdown(label="Run", choices=[], elem_id="runs-chosen", scale=3)
        open_live = gr.Button("Open live view", elem_id="runs-open", scale=1,
                              interactive=False)
        resume = gr.Button("Resume", elem_id="runs-resume", scale=1, interactive=False)
        cancel = gr.Button("Cancel run", variant="stop", elem_id="runs-cancel", scale=1,
                           interactive=False)
        delete = gr.Button("Delete…", elem_id="runs-delete", scale=1, interactive=False)
    with gr.Row(visible=False, elem_id="runs-confirm") as confirm_row:
        confirm_text = gr.Markdown()
        really = gr.Button("Yes, delete it", variant="stop", elem_id="runs-delete-yes",
                           scale=0, min_width=160)
        keep = gr.Button("Keep it", elem_id="runs-delete-no", scale=0, min_width=120)
    message = gr.Markdown(elem_id="runs-message")
    said = gr.State(None)  # the run the message speaks of and the state it said: {id, state}
    common = shared.current()
    timer = shared.page_timer(REFRESH_SECONDS)

    def refresh(page, previous, current, spoken):
        """The table when it changed, the message cleared once its run changed state (or a
        run came under a deleted run's id); and whether a run is queued or running."""
        listed = runs.list_runs(settings)
        rows = table_rows(listed)
        moving = any(plain(run["state"]) in MOVING for run in listed)
        stale = spoken is not None and \
            {row[0]: row[2] for row in rows}.get(spoken["id"]) != spoken["state"]
        words = ("", None) if stale else (gr.skip(), spoken)
        fresh = rows != previous  # an unchanged table is not sent again
        return (gr.update(value=rows, visible=bool(rows)) if fresh else gr.skip(),
                gr.update(visible=not rows) if fresh else gr.skip(),
                run_dropdown_update(settings, current, preselect=page == timer.page)
                if fresh or current is None else gr.skip(), rows, *words, moving)

    def shown_now(page, previous, current, spoken):
        """On show or after an action (`page`: the page shown)."""
        *updates, moving = refresh(page, previous, current, spoken)
        return *updates, timer.start(page, moving)

    def tick(page, previous, current, spoken):
        *updates, moving = refresh(page, previous, current, spoken)
        return *updates, timer.follow(page, moving)

    inputs = [sent, chosen, said]
    outputs = [table, empty, chosen, sent, message, said, timer.timer]
    shared.on_show(shown_now, inputs=inputs, outputs=outputs, with_page=True,
                   show_progress="hidden")
    timer.timer.tick(tick, inputs=[common.shown, *inputs], outputs=outputs,
                     show_progress="hidden")

    def pick(event: gr.SelectData):
        return event.row_value[0]

    table.select(pick, outputs=chosen)
    usable_with_a_run(chosen, [open_live, resume, cancel, delete])

    @toast_user_errors
    def show_live(run_id):
        return chosen_id(run_id), *shared.switch_to(live_run.PAGE_ID)

    open_live.click(show_live, inputs=chosen, outputs=[common.focus_run, *common.switch])

    def then_refresh(event):
        """After an action: the message, then the table at once (not at the next tick)."""
        event.then(lambda page, current, spoken: shown_now(page, None, current, spoken),
                   inputs=[common.shown, chosen, said], outputs=outputs, show_progress="hidden")

    def speaks_of(run: dict, words: str):
        """The message, and what it speaks of: the run and the state it is in now."""
        return (f"Run #{run['id']} **{markdown_text(run['name'])}** {words}",
                {"id": run["id"], "state": plain(run["state"])})

    @toast_user_errors
    def do_cancel(run_id, request: gr.Request):
        run = runs.cancel_run(settings, signed_in(settings, request), chosen_id(run_id))
        return speaks_of(run, live_run.cancelled_words(run))

    @toast_user_errors
    def do_resume(run_id, request: gr.Request):
        run = runs.resume_run(settings, signed_in(settings, request), chosen_id(run_id))
        return speaks_of(run, f"is queued again (attempt {run['attempt']}); it continues "
                         f"{runs.resume_point(run)}.")

    then_refresh(cancel.click(do_cancel, inputs=chosen, outputs=[message, said]))
    then_refresh(resume.click(do_resume, inputs=chosen, outputs=[message, said]))

    @toast_user_errors
    def ask_delete(run_id):
        run = runs.get_run(settings, chosen_id(run_id))
        return gr.Row(visible=True), (
            f"Delete run #{run['id']} **{markdown_text(run['name'])}** ({plain(run['state'])}) "
            "with its checkpoints, metrics, rollouts, evaluations and exports? This cannot be "
            "undone.")

    @toast_user_errors
    def do_delete(run_id, request: gr.Request):
        run = runs.get_run(settings, chosen_id(run_id))
        runs.delete_run(settings, signed_in(settings, request), run["id"])
        return gr.Row(visible=False), *speaks_of({**run, "state": None}, "is deleted."), None

    delete.click(ask_delete, inputs=chosen, outputs=[confirm_row, confirm_text])
    keep.click(lambda: gr.Row(visible=False), outputs=confirm_row)
    then_refresh(really.click(do_delete, inputs=chosen,
                              outputs=[confirm_row, message, said, chosen]))
