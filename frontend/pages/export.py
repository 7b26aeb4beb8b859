"""Export: a run's checkpoint as a Hugging Face folder, a zip to download, or a push to the
Hub, with its progress and the model card it carries."""

from __future__ import annotations

import io

import gradio as gr
from PIL import Image

from frontend import shared
from frontend.components import plain, signed_in, toast_user_errors
from frontend.run_picker import run_dropdown_update, tick_while_shown
from studio.escaping import html_text, markdown_text
from studio.services import exports, model_card
from studio.services.errors import InvalidInput
from studio.settings import Settings

TITLE = "Export"
TARGETS = [("A folder on the studio's machine", "folder"), ("A zip to download", "zip"),
           ("The Hugging Face Hub", "hub")]
HEADERS = ["id", "target", "checkpoint", "state", "progress", "what it is doing", "result"]
NO_RUN = ("### Nothing to export yet\nA run can be exported once it has written a checkpoint "
          "(every `engine.checkpoint_every` steps and at its end). Launch one on **Launch**.")
REFRESH_SECONDS = 2
CURVES_NOTE = "*(the image `reward_curves.png` is shown under **Reward curves** below)*"


def allowed_paths(settings: Settings) -> list[str]:
    """Finished zips are downloaded through the UI's own (logged-in) file route."""
    return [str(exports.exports_root(settings))]


def table_rows(found: list[dict]) -> list[list]:
    rows = []
    for e in found:
        result = e["error"] or e["location"] or (f"hub: {e['repo_id']}" if e["repo_id"] else "")
        rows.append([e["id"], e["target"], f"after step {e['step']}", plain(e["state"]),
                     f"{100 * (e['progress'] or 0):.0f}%", e["message"] or "", result])
    return rows


def download_html(settings: Settings, found: list[dict]) -> str:
    """Links to the finished zips (the newest first), as HTML for a gr.Markdown (which keeps
    `download`); the file name, which says run and step, is escaped."""
    links = []
    for e in found:
        if e["target"] == "zip" and plain(e["state"]) == "succeeded":
            path, name = map(html_text, exports.download(settings, e["id"]))
            links.append(f'<a href="/gradio_api/file={path}" download="{name}" '
                         f'class="export-download">⬇ {name}</a>')
    return "<br>".join(links)


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
    start = gr.Button("Export", variant="primary", elem_id="export-start")
    message = gr.Markdown(elem_id="export-message")
    table = gr.Dataframe(headers=HEADERS, interactive=False, wrap=True, elem_id="export-table",
                         label="Exports of this run")
    downloads = gr.Markdown(elem_id="export-downloads")
    with gr.Row(visible=False) as retry_row:
        retry_id = gr.Dropdown(label="Failed export to retry (a Hub push needs the token "
                               "again)", choices=[], scale=2, elem_id="export-retry-id")
        retry = gr.Button("Retry it", scale=1, elem_id="export-retry")
    shown = gr.State([])
    timer = gr.Timer(REFRESH_SECONDS, active=False)
    tick_while_shown(timer)
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

    def refresh_choices(current):
        update = run_dropdown_update(settings, current, only=has_checkpoint)
        return update, gr.update(visible=not update["choices"])

    shared.on_show(refresh_choices, inputs=run, outputs=[run, empty], show_progress="hidden")
    target.change(lambda t: gr.Group(visible=t == "hub"), inputs=target, outputs=hub)

    def progress(run_id):
        found = exports.list_exports(settings, int(run_id))
        failed = [(f"#{e['id']} {e['target']}", e["id"]) for e in found if e["retryable"]]
        return (table_rows(found), download_html(settings, found), gr.update(choices=failed),
                gr.Row(visible=bool(failed)))

    @toast_user_errors
    def pick_run(run_id):
        if run_id is None:
            return [gr.skip()] * 10
        steps = sorted(exports.checkpoint_steps(settings, int(run_id)), reverse=True)
        rendered, text, image = card_preview(settings, int(run_id), None, None)
        rows, links, failed, failed_row = progress(run_id)
        return (gr.update(choices=steps, value=steps[0] if steps else None), rendered, text,
                image, rows, links, failed, failed_row, rows, "")

    run.change(pick_run, inputs=run, outputs=[step, card, card_text, curves, table, downloads,
                                             retry_id, retry_row, shown, message])

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
        return (f"Export #{made['id']} queued: {markdown_text(made['message'])}.",
                *progress(run_id),
                "")  # the token field is emptied: it was handed to the job

    followed = [table, downloads, retry_id, retry_row]
    start.click(launch, inputs=[run, step, target, repo_id, token, private],
                outputs=[message, *followed, token])

    @toast_user_errors
    def do_retry(run_id, export_id, secret, request: gr.Request):
        if export_id is None:
            raise InvalidInput("Choose the failed export to retry (a Hub push needs the token "
                           "again).")
        again = exports.retry_export(settings, signed_in(settings, request), int(export_id),
                                     token=secret or None)
        return f"Export #{again['id']} queued again.", *progress(run_id), ""

    retry.click(do_retry, inputs=[run, retry_id, token], outputs=[message, *followed, token])

    def tick(run_id, previous):
        """The table while exports move; nothing is sent when nothing changed."""
        if run_id is None:
            return *[gr.skip()] * len(followed), previous
        now = progress(run_id)
        if now[0] == previous:
            return *[gr.skip()] * len(followed), previous
        return *now, now[0]

    timer.tick(tick, inputs=[run, shown], outputs=[*followed, shown], show_progress="hidden")
