"""The model shelf on the Launch page (studio.services.model_shelf): a table across the page
in plain words, and how a model that is not installed gets added. The command is shown to
admins, who can run it on the studio's machine, as a box to copy; everyone else reads that
an admin adds models."""

from __future__ import annotations

import gradio as gr

from frontend.components import acting, dataframe, table
from frontend.shared import on_show
from studio.escaping import code_span
from studio.models.base_models import models_dir
from studio.services.access import Actor
from studio.services.model_shelf import model_shelf, shelf_words
from studio.settings import Settings

SHELF_COLUMNS = (("name", "Model (the name to type)"), ("what", "What it is"),
                 ("ready", "Ready to train here?"), ("size", "Size"), ("licence", "Licence"),
                 ("chat", "Chat model?"), ("speed", "Speed on this studio"),
                 ("reads", "Answers from a passage it is handed"))
COLUMN_WIDTHS = ["13%", "15%", "14%", "10%", "8%", "12%", "13%", "15%"]
ORIGINS = {"folder in the data dir": "a model folder someone put in the studio's data folder",
           "Hugging Face cache": "downloaded from Hugging Face before"}
READY = {"converted": "yes", "ready": "yes",
         "installed": "yes; prepared when a run first uses it (a minute or so)"}
CHAT = {True: "yes: it takes a conversation",
        False: "no: a base model, the prompt is written as one text",
        None: "known after its first use"}
LEGEND = (
    "*Answers from a passage it is handed*: how often the model wrote exactly the right answer "
    "(EM: exact match) when handed the 3 passages the search finds first (BM25 top 3), or the "
    "passage that holds the answer. A model that cannot copy an answer from a passage learns "
    "little from searching. *Speed on this studio*: measured on the studio's worker by "
    "`studio calibrate`: reading the prompt (prefill), writing (decoding) and learning "
    "(update).")
ASK_AN_ADMIN = ("Want a model that is not ready here? Ask an admin to add models to the "
                "studio.")
INSTALL_LABEL = ("To add the models marked not installed, run this on the studio's machine, "
                 "then open this page again")


def shelf_row(row: dict, admin: bool) -> dict:
    """A shelf row in the page's words: an admin is pointed at the install command, anyone
    else at an admin."""
    missing = "not installed: the command is under the table" if admin else \
        "not installed: ask an admin to add it"
    origin = ORIGINS.get(row["source"], f"from the model {row['source']}")
    return {"name": f"{row['name']}{' (default)' if row['default'] else ''}",
            "what": f"{row['title']}, {origin}", "ready": READY.get(row["state"], missing),
            "size": shelf_words(row)["size"], "licence": row["licence"] or "see its model card",
            "chat": CHAT[row["chat_template"]], "speed": row["speed"] or "not measured yet",
            "reads": row["reader_ceiling"] or "not measured yet"}


def admin_words(settings: Settings) -> str:
    return ("Other models join the shelf as Hugging Face folders put in "
            f"{code_span(str(models_dir(settings.resolved_data_dir)))}; a Hub id typed in the "
            "model box below works where the studio reaches the network.")


def shelf_view(settings: Settings, actor: Actor):
    """The table, the install command (an admin's, when a model is missing) and the words
    under it."""
    rows = model_shelf(settings)
    commands = [row["install"] for row in rows if row["install"]]
    return (table([shelf_row(row, actor.is_admin) for row in rows], SHELF_COLUMNS),
            gr.Code("\n".join(commands), visible=actor.is_admin and bool(commands)),
            admin_words(settings) if actor.is_admin else ASK_AN_ADMIN)


def build(settings: Settings) -> None:
    """The shelf, folded, across the page; read again each time the page is shown."""
    with gr.Accordion("The model shelf: what each model is, its speed here, and how well it "
                      "reads what it is handed", open=False, elem_id="model-shelf-accordion"):
        shelf = dataframe(SHELF_COLUMNS, column_widths=COLUMN_WIDTHS, elem_id="model-shelf")
        gr.Markdown(LEGEND)
        install = gr.Code(language="shell", label=INSTALL_LABEL, interactive=False, lines=1,
                          show_line_numbers=False, buttons=["copy"], visible=False,
                          elem_id="model-shelf-install")
        words = gr.Markdown(elem_id="model-shelf-words")
    on_show(acting(settings, shelf_view), outputs=[shelf, install, words])
