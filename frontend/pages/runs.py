"""Runs: every training run with its state, progress and place in the queue; cancel, resume or
delete one."""

from __future__ import annotations

import gradio as gr

from frontend import shared
from frontend.components import plain, signed_in, toast_user_errors
from frontend.pages import live_run
from frontend.run_picker import run_dropdown_update, tick_while_shown, utc_minute
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
    shown = gr.State(None)  # the rows last sent, so an unchanged table is not re-sent
    with gr.Row(equal_height=True):
        chosen = gr.Dropdown(label="Run", choices=[], elem_id="runs-chosen", scale=3)
        open_live = gr.Button("Open live view", elem_id="runs-open", scale=1)
        resume = gr.Button("Resume", elem_id="runs-resume", scale=1)
        cancel = gr.Button("Cancel run", variant="stop", elem_id="runs-cancel", scale=1)
        delete = gr.Button("Delete…", elem_id="runs-delete", scale=1)
    with gr.Row(visible=False, elem_id="runs-confirm") as confirm_row:
        confirm_text = gr.Markdown()
        really = gr.Button("Yes, delete it", variant="stop", elem_id="runs-delete-yes",
                           scale=0, min_width=160)
        keep = gr.Button("Keep it", elem_id="runs-delete-no", scale=0, min_width=120)
    message = gr.Markdown(elem_id="runs-message")
    timer = gr.Timer(REFRESH_SECONDS, active=False)
    tick_while_shown(timer)

    def refresh(previous, current):
        rows = table_rows(runs.list_runs(settings))
        if rows == previous:
            return gr.skip(), gr.skip(), gr.skip(), previous
        return (gr.update(value=rows, visible=bool(rows)), gr.update(visible=not rows),
                run_dropdown_update(settings, current), rows)

    outputs = [table, empty, chosen, shown]
    shared.on_show(refresh, inputs=[shown, chosen], outputs=outputs, show_progress="hidden")
    timer.tick(refresh, inputs=[shown, chosen], outputs=outputs, show_progress="hidden")

    def pick(event: gr.SelectData):
        return event.row_value[0]

    table.select(pick, outputs=chosen)

    @toast_user_errors
    def show_live(run_id):
        return chosen_id(run_id), gr.Tabs(selected=live_run.PAGE_ID)

    common = shared.current()
    open_live.click(show_live, inputs=chosen, outputs=[common.focus_run, common.tabs])

    def then_refresh(event):
        """After an action: the message, then the table at once (not at the next tick)."""
        event.then(lambda current: refresh(None, current), inputs=chosen, outputs=outputs,
                   show_progress="hidden")

    @toast_user_errors
    def do_cancel(run_id, request: gr.Request):
        run = runs.cancel_run(settings, signed_in(settings, request), chosen_id(run_id))
        return (f"Run #{run['id']} **{markdown_text(run['name'])}** is cancelled; its "
                "checkpoints and metrics are kept, and *Resume* continues it.")

    @toast_user_errors
    def do_resume(run_id, request: gr.Request):
        run = runs.resume_run(settings, signed_in(settings, request), chosen_id(run_id))
        return (f"Run #{run['id']} **{markdown_text(run['name'])}** is queued again (attempt "
                f"{run['attempt']}); it continues from its last checkpoint.")

    then_refresh(cancel.click(do_cancel, inputs=chosen, outputs=message))
    then_refresh(resume.click(do_resume, inputs=chosen, outputs=message))

    @toast_user_errors
    def ask_delete(run_id):
        run = runs.get_run(settings, chosen_id(run_id))
        return gr.Row(visible=True), (
            f"Delete run #{run['id']} **{markdown_text(run['name'])}** ({plain(run['state'])}) "
            "with its checkpoints, metrics, rollouts, evaluations and exports? This cannot be "
            "undone.")

    @toast_user_errors
    def do_delete(run_id, request: gr.Request):
        name = runs.get_run(settings, chosen_id(run_id))["name"]
        runs.delete_run(settings, signed_in(settings, request), chosen_id(run_id))
        message = f"Run #{run_id} **{markdown_text(name)}** is deleted."
        return gr.Row(visible=False), message, None

    delete.click(ask_delete, inputs=chosen, outputs=[confirm_row, confirm_text])
    keep.click(lambda: gr.Row(visible=False), outputs=confirm_row)
    then_refresh(really.click(do_delete, inputs=chosen, outputs=[confirm_row, message, chosen]))
