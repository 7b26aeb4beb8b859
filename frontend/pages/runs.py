"""Runs: every training run with its state and progress; cancel, resume or delete one."""

from __future__ import annotations

import gradio as gr

from frontend import shared
from frontend.pages import live_run
from frontend.run_picker import plain, run_dropdown_update, shows_user_errors, utc_minute
from studio.services import runs
from studio.services.errors import InvalidInput
from studio.settings import Settings

TITLE = "Runs"
HEADERS = ["id", "name", "state", "progress", "queue", "backend", "created", "finished",
           "error"]
EMPTY = (
    "### No runs yet\n"
    "1. On **Data**, load the demo pack (or upload a corpus, a QA set and exemplars).\n"
    "2. On **Launch**, pick the model and the curriculum and press *Launch*.\n\n"
    "Runs then appear here with their state and progress. (From a terminal: "
    "`curl -X POST .../api/v1/runs` with a run config.)"
)
REFRESH_SECONDS = 3


def progress_text(run: dict) -> str:
    done, total = run["current_step"], run["total_steps"]
    percent = f" ({done / total:.0%})" if total else ""
    return f"{done} / {total} steps{percent}"


def table_rows(all_runs: list[dict]) -> list[list]:
    rows = []
    for run in all_runs:
        error = (run["error"] or "").strip().splitlines()
        rows.append([run["id"], run["name"], plain(run["state"]), progress_text(run), run["queue"],
                     run["backend"], utc_minute(run["created_at"]),
                     utc_minute(run["finished_at"]), error[-1][:120] if error else ""])
    return rows


def build(settings: Settings) -> None:
    gr.Markdown("## Runs\nEvery training run, newest first. Select a row to act on it; "
                "closing the browser never stops a run.")
    empty = gr.Markdown(EMPTY, visible=False, elem_id="runs-empty")
    table = gr.Dataframe(headers=HEADERS, interactive=False, elem_id="runs-table", wrap=True,
                         column_widths=["5%", "16%", "10%", "15%", "7%", "8%", "14%", "14%",
                                        "11%"])
    shown = gr.State(None)  # the rows last sent, so an unchanged table is not re-sent
    with gr.Row(equal_height=True):
        chosen = gr.Dropdown(label="Run", choices=[], elem_id="runs-chosen", scale=1)
        open_live = gr.Button("Open live view", elem_id="runs-open", scale=0, min_width=150)
        cancel = gr.Button("Cancel run", variant="stop", elem_id="runs-cancel", scale=0,
                           min_width=150)
    message = gr.Markdown(elem_id="runs-message")
    timer = gr.Timer(REFRESH_SECONDS)

    def refresh(previous, current):
        rows = table_rows(runs.list_runs(settings))
        if rows == previous:
            return gr.skip(), gr.skip(), gr.skip(), previous
        return (gr.update(value=rows, visible=bool(rows)), gr.update(visible=not rows),
                run_dropdown_update(settings, current), rows)

    outputs = [table, empty, chosen, shown]
    gr.on(triggers=None, fn=refresh, inputs=[shown, chosen], outputs=outputs,
          show_progress="hidden")
    timer.tick(refresh, inputs=[shown, chosen], outputs=outputs, show_progress="hidden")

    def pick(event: gr.SelectData):
        return event.row_value[0]

    table.select(pick, outputs=chosen)

    @shows_user_errors
    def show_live(run_id):
        if run_id is None:
            raise InvalidInput("Choose a run first (select its row in the table).")
        return int(run_id), gr.Tabs(selected=live_run.PAGE_ID)

    common = shared.current()
    open_live.click(show_live, inputs=chosen, outputs=[common.focus_run, common.tabs])

    @shows_user_errors
    def do_cancel(run_id):
        if run_id is None:
            raise InvalidInput("Choose a run first (select its row in the table).")
        run = runs.cancel_run(settings, int(run_id))
        return f"Run #{run['id']} **{run['name']}** is cancelled; its checkpoints and " \
               "metrics are kept.", None

    cancel.click(do_cancel, inputs=[chosen], outputs=[message, shown]).then(
        refresh, inputs=[shown, chosen], outputs=outputs, show_progress="hidden")
