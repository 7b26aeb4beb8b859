"""Export: a run's checkpoint as a Hugging Face folder, a zip to download, or a push to the
Hub, with its progress and the model card it carries; finished exports are deleted here to
free their owner's export quota."""

from __future__ import annotations

import io

import gradio as gr
from PIL import Image

from frontend import shared
from frontend.components import picker, plain, signed_in, toast_user_errors
from frontend.downloads import export_url
from frontend.run_picker import run_dropdown_update, usable_with_a_run
from studio.escaping import html_text, markdown_text
from studio.ingest.errors import human_bytes
from studio.jobs.lifecycle import ACTIVE_STATES
from studio.services import exports, model_card, runs
from studio.services.errors import InvalidInput
from studio.settings import Settings

TITLE = "Export"
TARGETS = [("A folder on the studio's machine", "folder"), ("A zip to download", "zip"),
           ("The Hugging Face Hub", "hub")]
HEADERS = ["id", "target", "checkpoint", "state", "progress", "what it is doing", "result",
           "on disk"]
NO_RUN = ("### Nothing to export yet\nA run can be exported once it has written a checkpoint "
          "(every `engine.checkpoint_every` steps and at its end). Launch one on **Launch**.")
REFRESH_SECONDS = 2
CURVES_NOTE = "*(the image `reward_curves.png` is shown under **Reward curves** below)*"


def downloadable(export: dict) -> bool:
    return export["target"] == "zip" and plain(export["state"]) == "succeeded"


def table_rows(found: list[dict], run_name: str) -> list[list]:
    """One row per export; a zip's result is the name it downloads under (not its path on the
    server: the link below downloads it)."""
    rows = []
    for e in found:
        result = e["error"] or (exports.zip_filename(run_name, e["step"]) if downloadable(e)
                                else e["location"]) or \
            (f"hub: {e['repo_id']}" if e["repo_id"] else "")
        rows.append([e["id"], e["target"], f"after step {e['step']}", plain(e["state"]),
                     f"{100 * (e['progress'] or 0):.0f}%", e["message"] or "", result,
                     human_bytes(e["stored_bytes"])])
    return rows


def download_html(found: list[dict], run_name: str) -> str:
    """Links to the finished zips (the newest first), as HTML for a gr.Markdown; the file
    name, which says run and step, is escaped. The route names the download the same."""
    names = [(e["id"], html_text(exports.zip_filename(run_name, e["step"])))
             for e in found if downloadable(e)]
    return "<br>".join(f'<a href="{export_url(export_id)}" download="{name}" '
                       f'class="export-download">⬇ {name}</a>' for export_id, name in names)


def card_preview(settings: Settings, run_id: int, step, repo_id: str | None):
    """The README.md an export carries, rendered and as text, and its reward-curve image."""
    card = model_card.build_model_card(settings, run_id, int(step) if step else None,
                                       (repo_id or "").strip() or None)
    text = card.markdown
    rendered = text.replace(f"![reward curves]({model_card.REWARD_CURVES})", CURVES_NOTE)
    if rendered.startswith("---\n"):  # the Hub's metadata block, shown as what it is
        _, front, body = rendered.split("---\n", 2)
        rendered = f"Hub metadata:\n```yaml\n{front}```\n{body}"
    png = card.reward_curves_png
    return rendered, text, Image.open(io.BytesIO(png)) if png else None


def said(export: dict) -> str:
    """What the page says of an export it just queued: its state, and where it waits or
    what it does (a worker of the short queue may have started it already)."""
    doing = f": {markdown_text(export['message'])}" if export["message"] else ""
    return f"Export #{export['id']} is {plain(export['state'])}{doing}."


def build(settings: Settings) -> None:
    gr.Markdown("## Export\nThe checkpoint as a Hugging Face model folder (weights as "
                "safetensors, tokenizer, generation config), with a model card and the run's "
                "YAML.")
    empty = gr.Markdown(NO_RUN, visible=False, elem_id="export-empty")
    with gr.Row():
        run = gr.Dropdown(label="Run (with a checkpoint)", choices=[], elem_id="export-run")
        step = gr.Dropdown(label="Checkpoint (steps done)", choices=[], elem_id="export-step")
    target = gr.Radio(TARGETS, value="folder", label="Export to", elem_id="export-target")
    with gr.Group(visible=False, elem_id="export-hub") as hub:
        with gr.Row():
            repo_id = gr.Textbox(label="Repository id", placeholder="your-name/model-name",
                                 elem_id="export-repo")
            token = gr.Textbox(label="Hugging Face access token (write access)",
                               type="password", elem_id="export-token",
                               info="Used for this export only; never stored or shown")
        private = gr.Checkbox(value=True, label="Private repository", elem_id="export-private")
    # usable once a run is chosen (`NO_RUN` says why there is none)
    start = gr.Button("Export", variant="primary", interactive=False, elem_id="export-start")
    message = gr.Markdown(elem_id="export-message")
    table = gr.Dataframe(headers=HEADERS, interactive=False, wrap=True, elem_id="export-table",
                         label="Exports of this run")
    downloads = gr.Markdown(elem_id="export-downloads")
    with gr.Row(visible=False) as retry_row:
        retry_id = gr.Dropdown(label="Failed export to retry (a Hub push needs the token "
                               "again)", choices=[], scale=2, elem_id="export-retry-id")
        retry = gr.Button("Retry it", scale=1, elem_id="export-retry")
    with gr.Row(visible=False) as delete_row:
        delete_id = gr.Dropdown(label="Export to delete with its files (frees its owner's "
                                "export quota; a Hub repository stays)", choices=[], scale=2,
                                elem_id="export-delete-id")
        delete = gr.Button("Delete it", variant="stop", scale=1, elem_id="export-delete")
    sent = gr.State([])  # the rows last sent
    common = shared.current()
    timer = shared.page_timer(REFRESH_SECONDS)
    gr.Markdown("### Model card preview")
    with gr.Tabs():
        with gr.Tab("README.md"):
            card = gr.Markdown(elem_id="export-card")
        with gr.Tab("As text"):
            card_text = gr.Code(language="markdown", interactive=False)
        with gr.Tab("Reward curves"):
            curves = gr.Image(show_label=False, type="pil", elem_id="export-curves")

    def has_checkpoint(r: dict) -> bool:
        return bool(r["checkpoint_dir"])

    followed = [table, downloads, retry_id, retry_row, delete_id, delete_row]

    def progress(run_id):
        """The exports of the run: table, links, the failed ones, those that can be deleted;
        and whether one moves."""
        found = exports.list_exports(settings, int(run_id))
        name = runs.get_run(settings, int(run_id))["name"]
        failed = [(f"#{e['id']} {e['target']}", e["id"]) for e in found if e["retryable"]]
        ended = [(f"#{e['id']} {e['target']} ({plain(e['state'])}, "
                  f"{human_bytes(e['stored_bytes'])})", e["id"])
                 for e in found if e["state"] not in ACTIVE_STATES]
        views = (table_rows(found, name), download_html(found, name), picker(failed),
                 gr.Row(visible=bool(failed)), picker(ended), gr.Row(visible=bool(ended)))
        return views, any(e["state"] in ACTIVE_STATES for e in found)

    def followed_now(run_id, previous):
        """The followed outputs when the table changed (else skipped), the rows, moving."""
        if run_id is None:
            return [gr.skip()] * len(followed), previous, False
        now, moving = progress(run_id)
        if now[0] == previous:
            return [gr.skip()] * len(followed), previous, moving
        return list(now), now[0], moving

    def refresh(page, current, previous):
        """Fresh choices, and the chosen run's exports as they are now (`page`: the page
        shown; choosing the only run renders its model card, not worth it out of view)."""
        update = run_dropdown_update(settings, current, only=has_checkpoint,
                                     preselect=page == timer.page)
        now, rows, moving = followed_now(current, previous)
        return update, gr.update(visible=not update["choices"]), *now, rows, \
            timer.start(page, moving)

    shared.on_show(refresh, inputs=[run, sent], outputs=[run, empty, *followed, sent,
                                                         timer.timer],
                   with_page=True, show_progress="hidden")
    target.change(lambda t: gr.Group(visible=t == "hub"), inputs=target, outputs=hub)

    @toast_user_errors
    def pick_run(page, run_id):
        if run_id is None:
            return [gr.skip()] * 13
        steps = sorted(exports.checkpoint_steps(settings, int(run_id)), reverse=True)
        rendered, text, image = card_preview(settings, int(run_id), None, None)
        views, moving = progress(run_id)
        return (gr.update(choices=steps, value=steps[0] if steps else None), rendered, text,
                image, *views, views[0], "", timer.start(page, moving))

    run.change(pick_run, inputs=[common.shown, run],
               outputs=[step, card, card_text, curves, *followed, sent, message, timer.timer])
    usable_with_a_run(run, [start])

    @toast_user_errors
    def preview(run_id, at_step, repo):
        if run_id is None:
            return gr.skip(), gr.skip(), gr.skip()
        return card_preview(settings, int(run_id), at_step, repo)

    gr.on([step.input, repo_id.blur], preview, inputs=[run, step, repo_id],
          outputs=[card, card_text, curves])

    @toast_user_errors
    def launch(run_id, at_step, to, repo, secret, is_private, request: gr.Request):
        if run_id is None:
            raise InvalidInput("Choose a run first: its checkpoint is what gets exported.")
        made = exports.create_export(settings, signed_in(settings, request), int(run_id),
                                     target=to,
                                     step=int(at_step) if at_step else None, repo_id=repo,
                                     private=bool(is_private), token=secret)
        return (said(made),
                *progress(run_id)[0], gr.Timer(active=True),
                "")  # the token field is emptied: it was handed to the job

    start.click(launch, inputs=[run, step, target, repo_id, token, private],
                outputs=[message, *followed, timer.timer, token])

    @toast_user_errors
    def do_retry(run_id, export_id, secret, request: gr.Request):
        if export_id is None:
            raise InvalidInput("Choose the failed export to retry (a Hub push needs the token "
                           "again).")
        again = exports.retry_export(settings, signed_in(settings, request), int(export_id),
                                     token=secret or None)
        return (said(again),
                *progress(run_id)[0], gr.Timer(active=True), "")

    retry.click(do_retry, inputs=[run, retry_id, token],
                outputs=[message, *followed, timer.timer, token])

    @toast_user_errors
    def do_delete(run_id, export_id, request: gr.Request):
        if export_id is None:
            raise InvalidInput("Choose the export to delete.")
        exports.delete_export(settings, signed_in(settings, request), int(export_id))
        return f"Export #{int(export_id)} deleted with its files.", *progress(run_id)[0]

    delete.click(do_delete, inputs=[run, delete_id], outputs=[message, *followed])

    def tick(page, run_id, previous):
        """The table while exports move; nothing is sent when nothing changed."""
        now, rows, moving = followed_now(run_id, previous)
        return *now, rows, timer.follow(page, moving)

    timer.timer.tick(tick, inputs=[common.shown, run, sent],
                     outputs=[*followed, sent, timer.timer], show_progress="hidden")
