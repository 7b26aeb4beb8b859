"""A new user's first run, in Chromium, from the login page to a downloaded, evaluated model.

    .venv/bin/python bench/first_run.py                  # the bundled SmolLM2, quick start
    .venv/bin/python bench/first_run.py --keep /tmp/first-run
    .venv/bin/python bench/first_run.py --quick          # a tiny model: checks the walk

`studio up` on a fresh data directory (the embedded default: SQLite, the embedded
broker, the bundled model), then only what a user sees and clicks: sign in with the
password `studio up` printed, *Launch the quick start*, *Watch it*, cancel it on the Live
run page (a newcomer's second thought), launch it again and wait on the Live run page
until the run ends, read base against trained on Evaluate, export a zip on Export and
download it; the downloaded model is then loaded with transformers and asked one
question. No API call, no CLI, no docs. It prints how long each phase took (a markdown
table) and saves a screenshot of each page on the way to
artifacts/screenshots/first-run-*.png. The walk stops with the page's text when a phase
does not come within its time limit, when a page shows a red error, or, at the end, when
the browser logged a script error.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playwright.sync_api import TimeoutError as PlaywrightTimeout  # noqa: E402

from studio.settings import Settings  # noqa: E402
from tests.support.studio_ui import studio_in_browser  # noqa: E402

DEFAULT_HEARTBEAT = Settings.model_fields["heartbeat_seconds"].default
BUNDLED_MODEL = Settings.model_fields["default_model"].default

RUN_LIMIT_S = 3 * 3600
PAGE_POLL_S = 1.0
"""How often the walk reads a page it waits on: the pages refresh every 2-3 s by themselves,
and a coarser poll only adds its period to each wait."""
ENDED = "succeeded|failed|cancelled|interrupted"  # the Live run status of a run that ended


class Phases:
    """Wall time of each phase, from the end of the one before."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, float]] = []
        self.mark = time.monotonic()

    def done(self, name: str) -> None:
        now = time.monotonic()
        self.rows.append((name, now - self.mark))
        self.mark = now
        print(f"{name}: {self.rows[-1][1]:.0f} s", flush=True)

    def table(self) -> str:
        lines = ["| phase | seconds |", "|---|---|"]
        lines += [f"| {name} | {seconds:.0f} |" for name, seconds in self.rows]
        lines.append(f"| **total** | {sum(s for _, s in self.rows):.0f} |")
        return "\n".join(lines)


def no_red_error(ui, where: str) -> None:
    """A page in the walk shows no error pill or error toast."""
    shown = ui.page.locator(".error:visible, .toast-body.error")
    if shown.count():
        raise SystemExit(f"{where}: the page shows an error: {shown.first.inner_text()}")


def launch_quick_start(ui, earlier: str = "") -> str:
    """*Launch the quick start* on the Launch page, then *Watch it*: the Live run page
    follows the run just launched ("#N", returned; its message replaces the one of the
    run launched `earlier`, "#N" too)."""
    ui.open("Launch")
    ui.wait_text("#quick-start-estimate", "Estimate", timeout=120)
    ui.page.click("#quick-start")
    other = rf"(?!{earlier[1:]}\b)" if earlier else ""
    told = ui.wait_first("#quick-start-message", rf"Run #{other}\d+", timeout=900)
    no_red_error(ui, "Launch")
    ui.page.locator("#quick-start-follow").click()
    run = re.search(r"Run (#\d+)", told).group(1)
    ui.wait_first("#live-status", rf"{run} ", timeout=60)
    return run


def walk(ui, phases: Phases, downloads: Path, first_step_s: float = 1800) -> Path:
    page = ui.page
    phases.done("sign in")

    first = launch_quick_start(ui)
    ui.screenshot("first-run-1-launch")
    page.locator("#live-cancel").click(timeout=120_000)
    page.locator("#live-cancel-yes").click()
    ui.wait_text("#live-status", "cancelled", timeout=300)
    no_red_error(ui, "Live run, cancelled")
    phases.done("launch the quick start and cancel it")

    relaunched = launch_quick_start(ui, earlier=first)
    phases.done("launch it again (stores its data pack)")

    # the page refreshes every few seconds: a tiny model's run may be past step 1, or over
    try:
        status = ui.wait_first("#live-status", rf"step [1-9]\d* /|{ENDED}", timeout=first_step_s)
    except PlaywrightTimeout:
        raise SystemExit(f"no step within {first_step_s:.0f} s; Live run says: "
                         f"{page.locator('#live-status').inner_text()}") from None
    ui.screenshot("first-run-2-live-first-step")
    phases.done("wait for the first step")
    deadline = time.monotonic() + RUN_LIMIT_S
    while time.monotonic() < deadline and not re.search(ENDED, status):
        time.sleep(PAGE_POLL_S)
        status = page.locator("#live-status").inner_text()
    ui.screenshot("first-run-3-live-ended")
    if f"{relaunched} " not in status:  # a tick of the cancelled run must not take the page
        raise SystemExit(f"Live run left {relaunched} for another run: {status}")
    if "succeeded" not in status:
        raise SystemExit(f"the run did not succeed: {status}")
    no_red_error(ui, "Live run, ended")
    phases.done("train to the end")

    ui.open("Evaluate")
    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline:
        rows = ui.table_rows("#evaluate-table")
        if rows and all("base succeeded · trained succeeded" in row[-1] for row in rows):
            break
        time.sleep(PAGE_POLL_S)
    else:
        raise SystemExit(f"the evaluations did not finish: {ui.table_rows('#evaluate-table')}")
    ui.screenshot("first-run-4-evaluate")
    no_red_error(ui, "Evaluate")
    print("Evaluate:", rows, flush=True)
    phases.done("wait for base against trained (queued at the run's end)")

    ui.open("Export")
    ui.wait_text("#export-card", "Intended use and limits", timeout=120)
    page.locator("#export-target").get_by_text("A zip to download").click()
    page.click("#export-start")
    link = page.locator("#export-downloads a")
    link.wait_for(timeout=900_000)
    ui.screenshot("first-run-5-export")
    with page.expect_download() as download:
        link.click()
    saved = downloads / download.value.suggested_filename
    download.value.save_as(saved)
    no_red_error(ui, "Export")
    phases.done("export a zip and download it")
    return saved


def tiny_model_ending_at_once(folder: Path) -> Path:
    """The tests' tiny random model, made to end every answer at once: its output layer,
    untied from its input embeddings, scores only <|im_end|>, on a dimension that every input
    embedding sets high. As it is, it writes each turn to its budget: the walk's training
    steps and evaluations, whose answers the walk does not read, took most of its time."""
    import torch
    from transformers import AutoModelForCausalLM

    from tests.support.tiny_model import build_tiny_model

    model = AutoModelForCausalLM.from_pretrained(build_tiny_model(folder))
    model.config.tie_word_embeddings = False
    with torch.no_grad():
        embeddings = model.get_input_embeddings().weight
        embeddings[:, 0] = 50.0  # the normalised hidden state's first value: about 8
        head = torch.zeros_like(embeddings)
        head[model.config.eos_token_id, 0] = 4.0  # <|im_end|> ahead by about 32 (logits)
        model.get_output_embeddings().weight = torch.nn.Parameter(head)
    model.save_pretrained(folder)
    return folder


def load_and_ask(archive: Path) -> str:
    """Unzip the export and ask the model one question with transformers."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = archive.with_suffix("")
    with zipfile.ZipFile(archive) as opened:
        opened.extractall(folder)
    model_dir = next(p.parent for p in folder.rglob("config.json"))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    messages = [{"role": "user", "content": "Where is the Eiffel Tower?"}]
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                           return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=40, do_sample=False)
    return tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="a folder for the studio's data and the zip "
                        "(default: a temporary one, removed)")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny random model that ends every answer at once as the "
                        "studio's default: the same walk in minutes, with nothing to read in "
                        "what the model answers")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="first-run-") as scratch:
        where = args.keep or Path(scratch)
        where.mkdir(parents=True, exist_ok=True)
        model = str(tiny_model_ending_at_once(where / "tiny")) if args.quick else BUNDLED_MODEL
        phases = Phases()
        # the studio's own heartbeat, as a user's: the tests' 1 s marks a run interrupted
        # when a loaded machine delays the worker's beat by 3 s
        with studio_in_browser(where, default_model=model,
                               heartbeat_seconds=str(DEFAULT_HEARTBEAT)) as ui:
            script_errors: list[str] = []
            ui.page.on("console", lambda message: message.type == "error"
                       and script_errors.append(message.text))
            ui.page.on("pageerror", lambda error: script_errors.append(str(error)))
            # a tiny model's first step comes in seconds: a stuck run fails in minutes
            archive = walk(ui, phases, where, first_step_s=300 if args.quick else 1800)
        print(f"console errors: {len(script_errors)}")
        if script_errors:
            raise SystemExit("the browser logged script errors:\n" + "\n".join(script_errors))
        print(f"\ndownloaded {archive.name} ({archive.stat().st_size / 2**20:.0f} MiB)")
        print("the exported model answers:", repr(load_and_ask(archive)))
        print()
        print(phases.table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
