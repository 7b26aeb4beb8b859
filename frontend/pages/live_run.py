"""Live run: the curves of a run as it trains and the stream of its rollouts, updated in place.

Each browser session keeps its own state (the rows it already has): a timer
asks the services only for metric rows after the last step it holds, and
redraws nothing when nothing is new; while the run trains, the line under the
run says what its step under way is doing (the run's `phase`). Steps are shown
from 1 (`studio.steps`). The page keeps the run it shows until the user picks
another or follows one from another page.
"""

from __future__ import annotations

import tempfile
import threading
from collections import OrderedDict
from datetime import datetime
from pathlib import Path

import gradio as gr

from frontend import shared
from frontend.charts import live_figure, plot_value
from frontend.components import (
    acting,
    counted_from_one,
    error_markdown,
    ok_markdown,
    plain,
    toast_user_errors,
)
from frontend.rollout_view import (
    COLOR_MAP,
    NO_TOKENS,
    OVERLAY_CHOICES,
    OVERLAY_OFF,
    OVERLAYS,
    bucket_class,
    header_markdown,
    highlighted,
    overlay_html,
    overlay_legend_html,
    reward_turns_markdown,
    token_summary,
    token_table,
)
from frontend.run_picker import run_choices, run_label
from studio.escaping import html_text, markdown_text
from studio.services import exemplar_drafts, run_history, runs
from studio.services.access import Actor
from studio.services.errors import InvalidInput, UserError
from studio.services.estimates import duration_words
from studio.services.run_progress import RunFollower
from studio.services.run_recorder import STEP_PHASES
from studio.settings import Settings
from studio.steps import shown_step, stored_step
from studio.storage.tables import utcnow

TITLE = "Live run"
PAGE_ID = __name__.rsplit(".", 1)[-1]  # the tab's id (frontend.shared.page_id)
TICK_SECONDS = 2.0
NO_RUN = ("### No run to show\nLaunch one on the **Launch** page (after loading data on "
          "**Data**); its curves and rollouts appear here as it trains.")
# A card is full screen while its <details class="full-screen"> is open: the browser toggles
# it, with no script (the page's Content-Security-Policy allows no script from a string).
FULL_SCREEN = ('<details class="full-screen"><summary><span class="rollout-open">Open full '
               'screen</span><span class="rollout-close">✕ Close</span></summary></details>')
OPEN = ".rollout-card:has(> .rollout-card details.full-screen[open])"  # the group's outer box
# The overlays' colour scales (frontend.rollout_view.OVERLAYS): `s` light to dark orange
# (more surprising or more unsure), `d` red (pushed down) through grey (0) to green (up).
SCALES = {"s": ("#fff7ed", "#ffedd5", "#fed7aa", "#fdba74", "#fb923c", "#f97316", "#ea580c",
                "#c2410c"),
          "d": ("#b91c1c", "#dc2626", "#f87171", "#fecaca", "#f3f4f6", "#bbf7d0", "#4ade80",
                "#16a34a", "#15803d")}
DARK = {"s": range(5, 8), "d": (0, 1, 7, 8)}  # buckets whose text is white


def chosen(overlay: str) -> str:
    """The rollout column while the *Token colours* radio has `overlay` checked: choosing an
    overlay is the browser's own radio state read by CSS, with no request and no redraw (the
    cards carry every overlay's classes)."""
    return f'#live-rollouts:has(#live-overlay input[value="{overlay}"]:checked)'


ANY_OVERLAY = f'#live-rollouts:has(#live-overlay input:checked:not([value="{OVERLAY_OFF}"]))'
SCALE_CSS = "\n".join(
    f"{chosen(name)} .{bucket_class(name, i)} {{ background: {colour};"
    f"{' color: white;' if i in DARK[overlay.family] else ''} }}"
    for name, overlay in OVERLAYS.items()
    for i, colour in enumerate(SCALES[overlay.family]))
LEGEND_CSS = "\n".join(f"{chosen(name)} .legend-{name} {{ display: block; }}"
                        for name in OVERLAYS)
CSS = f"""
.rollout-card {{ max-height: 420px; overflow: auto; }}
/* A card's parts keep their height and the card scrolls: as items of the group's flex column
   they shrank to fit 420px, and the header slid over "Open full screen". */
.rollout-card > .styler, .rollout-card .styler > .block {{ flex-shrink: 0; }}
{OPEN} {{ position: fixed !important; inset: 0; z-index: 1000;
  max-height: none; background: var(--background-fill-primary); padding: 16px 32px; }}
{OPEN} .rollout-card {{ max-height: none; overflow: visible; }}
.rollout-card .full-only {{ display: none !important; }}
{OPEN} .full-only {{ display: block !important; }}
.rollout-toggle summary {{ list-style: none; cursor: pointer; display: inline-block;
  padding: 2px 10px; border: 1px solid var(--border-color-primary); border-radius: 6px;
  font-size: 13px; }}
.rollout-toggle summary::-webkit-details-marker {{ display: none; }}
.rollout-toggle details[open] .rollout-open,
.rollout-toggle details:not([open]) .rollout-close {{ display: none; }}
.live-legend span {{ padding: 1px 6px; border-radius: 4px; margin-right: 6px; font-size: 13px;
  color: white; white-space: nowrap; }}
.token-overlay {{ white-space: pre-wrap; line-height: 1.8; font-size: 14px; }}
.token-legend {{ font-size: 13px; line-height: 2; }}
.token-legend .tok {{ margin-left: 4px; padding: 1px 6px; white-space: nowrap; }}
.tok {{ border-radius: 3px; color: #111827; }}
.tok-masked {{ background: #e5e7eb; color: #6b7280; font-style: italic; }}
.token-legend {{ display: none; }}
.rollout-card .overlay-only {{ display: none !important; }}
{ANY_OVERLAY} .rollout-card .overlay-only {{ display: block !important; }}
{ANY_OVERLAY} .rollout-card .overlay-off-only {{ display: none !important; }}
{LEGEND_CSS}
{SCALE_CSS}
"""


def legend_html() -> str:
    """The colours of the rollout text, as HTML for a gr.Markdown (gr.HTML compiles a
    template with `new Function`, which the page's Content-Security-Policy refuses)."""
    chips = "".join(f'<span style="background:{colour}">{html_text(label)}</span>'
                    for label, colour in COLOR_MAP.items())
    return f'<div class="live-legend">{chips}</div>'


def default_run(settings: Settings) -> int | None:
    """The newest running run, else the newest that is not waiting (it has curves to show),
    else the newest."""
    all_runs = runs.list_runs(settings)
    running = [r for r in all_runs if r["state"] == "running"]
    started = [r for r in all_runs if r["state"] != "queued"]
    chosen = (running or started or all_runs or [None])[0]
    return chosen["id"] if chosen else None


def state_help(run: dict) -> str:
    """What a run that is not training waits for, or what *Resume* would do: continue from
    its last checkpoint, or start again from step 1 when it has none yet. Empty for a
    running or finished run."""
    state = plain(run["state"])
    if state == "queued":
        return "waiting for a worker"
    if state == "paused":
        return ("the collapse sentinel stopped it at a checkpoint (the reason is below): "
                "*Resume* on **Runs** continues from there")
    if state not in ("interrupted", "failed", "cancelled"):
        return ""
    why = "its worker stopped: " if state == "interrupted" else ""
    return f"{why}*Resume* on **Runs** continues it {runs.resume_point(run)}"


# a step's phase -> the metric that timed it at the last step
PHASE_TIMES = dict(zip(STEP_PHASES, ("time_rollout", "time_reference", "time_update"),
                       strict=True))


def doing_now(run: dict, last: dict | None, now: datetime) -> str:
    """What a running run does now: the step under way, its phases with the current one in
    bold, and how long it has been at it against what that phase and the whole step took at
    the last step (or, before the first step, the launch's estimate of a step). Empty for
    an engine that says nothing (veRL) once its steps come."""
    phase = run.get("phase")
    if not phase:
        return "" if last else "Now: starting the training process."
    seconds = max(0, round((now - datetime.fromisoformat(phase["since"])).total_seconds()))
    name = phase["name"]
    if name not in PHASE_TIMES:
        return f"Now: {markdown_text(name)} ({seconds} s so far)."
    phases = " → ".join(f"**{p}**" if p == name else p for p in STEP_PHASES)
    took, step_took = ((last or {}).get(key) for key in (PHASE_TIMES[name], "time_step"))
    if took is not None:
        whole = f", the whole step {duration_words(step_took)}" if step_took is not None else ""
        pace = f"; at the last step {name} took {duration_words(took)}{whole}"
    elif run.get("first_step_seconds"):
        pace = (f"; a whole step takes at most about {duration_words(run['first_step_seconds'])}"
                " (the launch's estimate)")
    else:
        pace = ""
    return (f"Now: step {shown_step(phase['step'])} of {run['total_steps']}: {phases} "
            f"({seconds} s so far{pace}).")


def first_point_note(run: dict) -> str:
    """What the empty curves say: when their first point comes."""
    state = run["state"]
    if state == "queued":
        return ("Waiting for a worker: the curves start with step 1,\n"
                "a point per step, once a worker takes this run.")
    if state != "running":
        return "This run stopped before its first step: it has no point to draw."
    estimate = run.get("first_step_seconds")
    when = (f", in at most about {duration_words(estimate)} (the launch's estimate)"
            if estimate else "")
    return (f"The first point comes after step 1{when}.\n"
            "The line above says what the run is doing now.")


def status_markdown(run: dict, rows: list[dict], events: list[dict],
                    now: datetime | None = None) -> str:
    """State, step, stage and reward in one line; what a running run does now; then what
    to do, errors and warnings."""
    last = rows[-1] if rows else None
    parts = [f"**{markdown_text(run_label(run))}**",
             f"step {run['current_step']} / {run['total_steps']}"]
    if last:
        parts.append(f"stage {last['stage'] + 1} ({last['exemplars']} exemplars)")
        parts.append(f"reward {last.get('reward_mean') or 0:.2f}")
    lines = [" · ".join(parts)]
    state = plain(run["state"])
    if state == "running" and (now_line := doing_now(run, last, now or utcnow())):
        lines.append(now_line)
    if help_now := state_help(run):
        position = run.get("queue_position")
        where = f" (#{position} in the {markdown_text(run['queue'])} queue)" if position else ""
        lines.append(f"{state}{where}: {help_now}.")
    if run["error"]:
        label = "Why" if state == "paused" else "Error"
        lines.append(f"**{label}:** {markdown_text(run['error'].strip().splitlines()[-1])}")
    lines += [f"⚠️ step {shown_step(e['step'])}: {markdown_text(e['message'])}"
              for e in events if e["kind"] == "warning"]
    return "  \n".join(lines)


def by_step(rows: list[dict]) -> list[dict]:
    """Metric rows in step order, one per step: a step run again after a resume replaces
    the row it had."""
    return sorted({row["step"]: row for row in rows}.values(), key=lambda row: row["step"])


def in_step_order(events: list[dict]) -> list[dict]:
    return sorted(events, key=lambda event: (event["step"], event["id"]))


def parse_step(text: str | None) -> int | None:
    """The step box (counted from 1, as shown) as a stored step; empty is every step."""
    typed = counted_from_one(text, "Step: '{typed}' is not a step number; steps count from 1: "
                             "type a whole number such as 12, or leave it empty for all steps.")
    return None if typed is None else stored_step(typed)


def filter_rollouts(settings: Settings, run_id: int, step, stage, reward_min: float,
                    reward_max: float, count: int) -> list[dict]:
    """The newest rollouts (with their segments) matching the filters."""
    at = parse_step(step)
    found = run_history.rollout_page(settings, run_id, run_history.RolloutFilter(
        step_min=at, step_max=at, stage=None if stage in (None, "all") else int(stage) - 1,
        reward_min=reward_min, reward_max=reward_max), limit=int(count or 4), segments=True,
        tokens=True)
    return found["items"]


def rollout_card(rollout: dict) -> None:
    """One rollout: header, its text (highlighted by tag, and token by token for the colour
    overlays, shown by the page's CSS as the radio says), and (shown full screen) the reward
    per turn and its token table. Full screen is the browser's own toggle (`FULL_SCREEN`):
    the card already holds the whole rollout, so no request is needed."""
    with gr.Group(elem_classes=["rollout-card"], elem_id=f"rollout-{rollout['id']}"):
        gr.Markdown(FULL_SCREEN, elem_classes=["rollout-toggle"])
        gr.Markdown(header_markdown(rollout))
        gr.Markdown(token_summary(rollout), elem_classes=["full-only", "rollout-tokens"])
        gr.Markdown(legend_html(), elem_classes=["full-only"])
        recorded = bool((rollout.get("token_view") or {}).get("recorded"))
        # Every card has the same components in the same order, with or without token
        # figures: a redraw that changed a card's shape handed a gr.Markdown's text to the
        # HighlightedText that had held its place, which threw in the browser (reading
        # `token.split`) and left the old cards on the page.
        gr.Markdown(overlay_legend_html() if recorded else "", visible=recorded,
                    elem_classes=["rollout-overlay-legend", "overlay-only"])
        # no formulas: a token's `$$` is text
        gr.Markdown(overlay_html(rollout) if recorded else "", visible=recorded,
                    latex_delimiters=[], elem_classes=["rollout-overlay", "overlay-only"])
        gr.Markdown(NO_TOKENS, visible=not recorded,
                    elem_classes=["rollout-no-tokens", "overlay-only"])
        gr.HighlightedText(highlighted(rollout), color_map=COLOR_MAP, show_legend=False,
                           show_label=False,
                           elem_classes=["rollout-text", *["overlay-off-only"] * bool(recorded)])
        gr.Markdown(reward_turns_markdown(rollout), elem_classes=["full-only", "rollout-turns"])
        gr.Markdown(token_table(rollout), elem_classes=["full-only", "rollout-token-table"])


def keep_rollout(settings: Settings, actor: Actor, current: dict | None,
                 rollout_id: float | None, set_name: str | None) -> str:
    """A rollout of the run shown, exactly as stored, added to an exemplar set (the Exemplars
    page edits it)."""
    if not current or not rollout_id:
        return error_markdown("rollout: open a run and give the number on a rollout's card",
                              "Nothing kept")
    try:
        found = exemplar_drafts.keep_rollout(settings, actor, current["run_id"],
                                             int(rollout_id), (set_name or "").strip())
    except UserError as exc:
        return error_markdown(str(exc), "Nothing kept")
    return ok_markdown(f"Kept rollout #{int(rollout_id)} as exemplar {found['size']} of "
                       f"'{found['name']}': edit it on the Exemplars page")


CANCELLABLE = ("queued", "running")


def cancel_button(run: dict | None) -> gr.Button:
    """*Cancel run*, shown while the run shown is queued or running."""
    return gr.Button(visible=bool(run) and plain(run["state"]) in CANCELLABLE)


def cancel_question(settings: Settings, current: dict | None) -> str:
    """What the confirmation asks before a cancel: which run, and what a resume would do."""
    run = runs.get_run(settings, current["run_id"])
    return (f"Cancel run **{markdown_text(run_label(run))}** (step {run['current_step']} of "
            f"{run['total_steps']})? It stops within seconds; *Resume* on **Runs** continues "
            f"it later {runs.resume_point(run)}.")


def cancelled_words(run: dict) -> str:
    """What a page says of a run it just cancelled (after its name)."""
    return f"is cancelled; *Resume* on **Runs** continues it {runs.resume_point(run)}."


def cancel_shown_run(settings: Settings, actor: Actor, current: dict | None) -> str:
    """Cancel the run shown as the signed-in user, checked as on the Runs page (its owner or
    an admin); the outcome, or why not, as the page's message."""
    if not current:
        return error_markdown("run: choose the run to cancel first", "Not cancelled")
    try:
        run = runs.cancel_run(settings, actor, current["run_id"])
    except UserError as exc:
        return error_markdown(str(exc), "Not cancelled")
    return f"Run #{run['id']} **{markdown_text(run['name'])}** {cancelled_words(run)}"


def config_path(settings: Settings, run_id: int) -> str:
    """The run's YAML as a file to download (`studio run launch` takes it as it is)."""
    name, text = run_history.run_config_yaml(settings, run_id)
    folder = Path(tempfile.gettempdir()) / "icrl-studio-run-yaml" / str(run_id)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return str(folder / name)


def stage_choices(rows: list[dict]) -> list[str]:
    return ["all"] + [str(s) for s in sorted({r["stage"] + 1 for r in rows})]


class OpenedRuns:
    """The run each browser session last opened on this page, and a lock per session that an
    answer about a run holds from its read to its return. A timer tick already under way when
    the user opens another run (*Watch it* on a new run while the page follows a running one)
    read the old run; had it returned after the open, its state would have taken the page
    back to the old run for good. Under the lock the tick answers first and the open after
    it, or the open first and the tick, seeing it is no longer about the run opened last,
    sends nothing. Holds the last `sessions` sessions."""

    def __init__(self, sessions: int = 1000) -> None:
        self.sessions = sessions
        self.run_of: OrderedDict[str, int] = OrderedDict()
        self.locks: OrderedDict[str, threading.Lock] = OrderedDict()
        self.guard = threading.Lock()

    def lock(self, session: str) -> threading.Lock:
        with self.guard:
            lock = self.locks.pop(session, None) or threading.Lock()
            self.locks[session] = lock
            while len(self.locks) > self.sessions:
                self.locks.popitem(last=False)
            return lock

    def opened(self, session: str, run_id: int | None) -> None:
        with self.guard:
            self.run_of.pop(session, None)
            if run_id is not None:
                self.run_of[session] = run_id
                while len(self.run_of) > self.sessions:
                    self.run_of.popitem(last=False)

    def is_last(self, session: str, run_id: int) -> bool:
        return self.run_of.get(session, run_id) == run_id


def build(settings: Settings) -> None:
    common = shared.current()
    opened_runs = OpenedRuns()
    # {"run_id", "rows", "events", "status", "note" (of the empty curves), "follower"}
    state = gr.State(None)
    with gr.Row(equal_height=True):
        chosen = gr.Dropdown(label="Run", choices=[], elem_id="live-run", scale=4)
        refresh = gr.Button("↻ Runs", size="sm", scale=0, min_width=80)
        config_file = gr.DownloadButton("Run YAML", size="sm", scale=0, min_width=120,
                                        visible=False, elem_id="live-yaml")
        cancel = gr.Button("Cancel run", variant="stop", size="sm", scale=0, min_width=120,
                           visible=False, elem_id="live-cancel")
    with gr.Row(visible=False, elem_id="live-cancel-confirm") as confirm_row:
        confirm_text = gr.Markdown()
        really = gr.Button("Yes, cancel run", variant="stop", scale=0, min_width=200,
                           elem_id="live-cancel-yes")
        keep = gr.Button("Keep it", scale=0, min_width=120, elem_id="live-cancel-no")
    cancel_message = gr.Markdown(elem_id="live-cancel-message")
    status = gr.Markdown(NO_RUN, elem_id="live-status")
    with gr.Row():
        with gr.Column(scale=3):
            plot = gr.Plot(label="Training curves", elem_id="live-plot", show_label=False)
        with gr.Column(scale=2, elem_id="live-rollouts") as stream:
            gr.Markdown("#### Rollouts")
            gr.Markdown(legend_html())
            with gr.Row():
                step = gr.Textbox(label="Step (then Enter)", placeholder="all steps",
                                  elem_id="live-filter-step")
                stage = gr.Dropdown(label="Stage", choices=["all"], value="all",
                                    elem_id="live-filter-stage")
                count = gr.Number(label="Show", value=4, precision=0, minimum=1, maximum=50)
            with gr.Row():
                reward_min = gr.Slider(0, 1, value=0, step=0.05, label="Reward at least")
                reward_max = gr.Slider(0, 1, value=1, step=0.05, label="Reward at most")
            # no event: the page's CSS reads the checked choice (`chosen`)
            gr.Radio(OVERLAY_CHOICES, value=OVERLAY_OFF, label="Token colours",
                     elem_id="live-overlay", interactive=True,
                     info="a colour behind each token the model wrote; hover one for its "
                          "figures (docs/engine.md says what they mean)")
            shown = gr.State([])
            with gr.Accordion("Keep a correct rollout as an exemplar", open=False,
                              elem_id="keep-rollout-form"):
                with gr.Row():
                    keep_id = gr.Number(label="Rollout # (on its card)", precision=0,
                                        minimum=1, elem_id="keep-rollout-id")
                    keep_set = gr.Textbox(label="Exemplar set (made if new)",
                                          elem_id="keep-rollout-set")
                keep_button = gr.Button("Keep as exemplar", size="sm", elem_id="keep-rollout")
                keep_message = gr.Markdown(elem_id="keep-rollout-message")

    with stream:
        @gr.render(inputs=shown)
        def cards(rollouts):
            if not rollouts:
                gr.Markdown("No rollout matches yet: they appear after each step "
                            "(or widen the filters).", elem_id="live-no-rollouts")
            for rollout in rollouts:
                rollout_card(rollout)

    timer = shared.page_timer(TICK_SECONDS)
    filters = [step, stage, reward_min, reward_max, count]
    opened = [state, status, plot, shown, stage, timer.timer, cancel]

    def open_run(run_id, page, request: gr.Request, *filter_values):
        """Everything the page shows of a run, read once; the timer then adds what is new
        (while the page is shown: `page` is the page shown)."""
        with opened_runs.lock(request.session_hash):
            return read_run(run_id, page, request, *filter_values)

    def read_run(run_id, page, request: gr.Request, *filter_values):
        opened_runs.opened(request.session_hash, None if run_id is None else int(run_id))
        if run_id is None:
            return (None, NO_RUN, None, [], gr.update(choices=["all"]), gr.skip(),
                    cancel_button(None), gr.DownloadButton(visible=False))
        follower = RunFollower(settings, int(run_id))
        progress = follower.poll()
        run, final = progress.run, progress.final
        rows, events = by_step(progress.metrics), in_step_order(progress.events)
        status, note = status_markdown(run, rows, events), first_point_note(run)
        return ({"run_id": run["id"], "rows": rows, "events": events, "status": status,
                 "note": note, "follower": follower},
                status, plot_value(live_figure(rows, events, note)),
                filter_rollouts(settings, run["id"], *filter_values),
                gr.update(choices=stage_choices(rows)), timer.start(page, not final),
                cancel_button(run),
                gr.DownloadButton(value=config_path(settings, run["id"]), visible=True))

    @toast_user_errors
    def choose(run_id, page, request: gr.Request, *filter_values):
        """Fresh run choices with `run_id` (default: `default_run`) opened."""
        run_id = run_id if run_id is not None else default_run(settings)
        return gr.update(choices=run_choices(settings), value=run_id), \
            *open_run(run_id, page, request, *filter_values)

    def on_load(step_value, stage_value, low, high, how_many, request: gr.Request):
        """`/?run=ID` opens this page on that run (a link to share or bookmark)."""
        filter_values = step_value, stage_value, low, high, how_many
        linked = request.query_params.get("run", "")
        if linked.isdigit():
            return (*choose(int(linked), PAGE_ID, request, *filter_values),
                    *shared.switch_to(PAGE_ID))
        return *choose(None, None, request, *filter_values), gr.skip(), gr.skip()

    # the page's load only: gr.on(triggers=None) would also run it on every filter change
    common.blocks.load(on_load, inputs=filters,
                       outputs=[chosen, *opened, config_file, *common.switch],
                       show_progress="hidden")
    # a run followed from another page (Launch's *Watch it*, Runs' *Open live view*); a run
    # merely launched does not take the page from the run it shows
    common.focus_run.change(choose, inputs=[common.focus_run, common.shown, *filters],
                            outputs=[chosen, *opened, config_file], show_progress="hidden")
    chosen.input(toast_user_errors(open_run), inputs=[chosen, common.shown, *filters],
                 outputs=[*opened, config_file])
    gr.on([refresh.click, common.tab.select], lambda: gr.update(choices=run_choices(settings)),
          outputs=chosen, show_progress="hidden")

    def tick(current, page, request: gr.Request, *filter_values):
        with opened_runs.lock(request.session_hash):
            return read_news(current, page, request, *filter_values)

    def read_news(current, page, request: gr.Request, *filter_values):
        """Only rows written since the last tick are fetched; the status line is sent when
        it changed (a running run's phase and seconds), the curves when rows came (or the
        empty curves' note changed); nothing new sends nothing, nor a tick about a run
        other than the one opened last (`OpenedRuns`)."""
        if not current:
            return [gr.skip()] * 5 + [gr.Timer(active=False), gr.skip()]
        progress = current["follower"].poll()
        run = progress.run
        if not opened_runs.is_last(request.session_hash, run["id"]):
            return [gr.skip()] * len(opened)
        keep_going = timer.follow(page, not progress.final)
        new = bool(progress.metrics or progress.events)
        rows = by_step(current["rows"] + progress.metrics)
        events = in_step_order(current["events"] + progress.events)
        status, note = status_markdown(run, rows, events), first_point_note(run)
        redraw = new or (not rows and note != current["note"])
        if not redraw and status == current["status"]:
            return [gr.skip()] * 5 + [keep_going, gr.skip()]
        current = {**current, "rows": rows, "events": events, "status": status, "note": note}
        figure = plot_value(live_figure(rows, events, note)) if redraw else gr.skip()
        if not new:
            return current, status, figure, gr.skip(), gr.skip(), keep_going, cancel_button(run)
        try:
            rollouts = filter_rollouts(settings, run["id"], *filter_values)
        except InvalidInput:  # a bad filter was already reported when it was typed
            rollouts = gr.skip()
        return (current, status, figure, rollouts, gr.update(choices=stage_choices(rows)),
                keep_going, cancel_button(run))

    timer.timer.tick(tick, inputs=[state, common.shown, *filters], outputs=opened,
                     show_progress="hidden")

    @toast_user_errors
    def refilter(current, *filter_values):
        if not current:
            return []
        return filter_rollouts(settings, current["run_id"], *filter_values)

    keep_button.click(acting(settings, keep_rollout), [state, keep_id, keep_set],
                      keep_message)

    # *Cancel run* asks first; *Yes, cancel run* cancels as the Runs page does, then the
    # status line and the button follow at once (not at the next tick)
    cancel.click(toast_user_errors(lambda current: (gr.Row(visible=True), cancel_question(
        settings, current))), inputs=state, outputs=[confirm_row, confirm_text])
    keep.click(lambda: gr.Row(visible=False), outputs=confirm_row)
    really.click(acting(settings, cancel_shown_run), inputs=state, outputs=cancel_message) \
        .then(lambda: gr.Row(visible=False), outputs=confirm_row) \
        .then(tick, inputs=[state, common.shown, *filters], outputs=opened,
              show_progress="hidden")
    chosen.change(lambda: (gr.Row(visible=False), ""), outputs=[confirm_row, cancel_message],
                  show_progress="hidden")
    gr.on([step.submit, stage.input, reward_min.release, reward_max.release, count.submit],
          refilter, inputs=[state, *filters], outputs=shown)
