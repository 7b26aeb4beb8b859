"""A stored rollout as the viewer shows it: tag kinds styled apart, tool output marked as
not trained on (the spans the loss mask zeros), its reward and token counts.

Rollout rows come from the runs services: `segments` are
`{source: prompt | model | env, text, tokens, parts: [{kind, text}]}`. Every registered
tool's tags are styled (each tool's calls in a colour of its own; the environment's information,
output and result blocks alike, each labelled with its tag). Each segment's parts
were parsed alone, so the model's first words after an assistant prefix that opens `<think>`
were stored as plain text; the viewer reads them on from the prefix (`segment_parts`), as
the model wrote them: inside the think span. Steps are shown from 1 (`studio.steps`).
Questions, answers and model output are shown as text (`studio.escaping`): the highlighted
text is a component's text; what goes into Markdown is escaped.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass

from studio.escaping import html_text, markdown_text
from studio.method.rollouts import reward_turns
from studio.method.tags import parse
from studio.method.tools import all_specs
from studio.steps import shown_step

RESULT_LABELS = {spec.result_tag: f"{spec.result_tag} (not trained on)" for spec in all_specs()}
"""The environment's text is labelled with its result tag: `<information>`, `<output>`,
`<result>` (a corrective note is in the run's first tool's)."""
NOT_TRAINED = RESULT_LABELS["information"]  # and environment text stored without its tag
PREFIX = "prompt prefix"
CALL_COLOURS = ("#f97316", "#0891b2", "#db2777", "#7c3aed", "#0d9488", "#be123c")
"""Each registered tool's call in a colour of its own, in registration order."""
COLOR_MAP = {
    "think": "#6366f1",
    **{spec.call_tag: CALL_COLOURS[n % len(CALL_COLOURS)] for n, spec in enumerate(all_specs())},
    "answer": "#16a34a",
    **dict.fromkeys(RESULT_LABELS.values(), "#ca8a04"),
    PREFIX: "#6b7280",
}
HINT_QUESTION_CHARS = 60  # of an exemplar's question in a guided rollout's header
SOURCE_NAMES = {"prompt": "assistant prefix (from the prompt)", "model": "model",
                "env": "environment"}


def _label(source: str, kind: str) -> str | None:
    """The environment's text (search results, program output, calculator results,
    corrective notes, each in a result tag) is all masked; its label names the tag."""
    if source == "env":
        return RESULT_LABELS.get(kind, NOT_TRAINED)
    if source == "prompt":
        return PREFIX
    return kind if kind in COLOR_MAP else None


def _read_on(prefix: str, text: str) -> list[dict]:
    """The parts of `text` as written after `prefix`: a tag the prefix left open spans on."""
    whole = prefix + text
    return [{"kind": part.kind, "text": whole[max(part.start, len(prefix)):part.end]}
            for part in parse(whole, all_specs()) if part.end > len(prefix)]


def segment_parts(rollout: dict) -> list[tuple[dict, list[dict]]]:
    """Each segment with its tag parts; the model segment right after the prompt prefix is
    read on from the prefix."""
    found, previous = [], None
    for segment in rollout["segments"]:
        if segment["source"] == "model" and previous and previous["source"] == "prompt":
            parts = _read_on(previous["text"], segment["text"])
        else:
            parts = segment.get("parts") or [{"kind": "text", "text": segment["text"]}]
        found.append((segment, parts))
        previous = segment
    return found


def highlighted(rollout: dict) -> list[tuple[str, str | None]]:
    """The value of a `gr.HighlightedText`: (text, label) per tag part; plain text unlabelled."""
    return [(part["text"], _label(segment["source"], part["kind"]))
            for segment, parts in segment_parts(rollout) for part in parts]


def _fmt(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "–"
    return f"{value:+.2f}" if signed else f"{value:.2f}"


def cut_short(text: str, limit: int) -> str:
    """`text` on one line, cut to `limit` characters with an ellipsis."""
    line = " ".join(text.split())
    return line[:limit] + ("…" if len(line) > limit else "")


def guided_line(rollout: dict) -> str:
    """For a rollout sampled with exemplars as a hint (guidance `mixed`): which exemplars it
    saw (from 1, with their questions cut short where the run's snapshot has them) and that
    it learned on the prompt without them; empty for any other rollout."""
    hint = rollout.get("hint_exemplars")
    if not hint:
        return ""
    questions = rollout.get("hint_questions") or [None] * len(hint)
    seen = ", ".join(f"{i + 1}" + (f" ({markdown_text(cut_short(q, HINT_QUESTION_CHARS))})"
                                   if q else "")
                     for i, q in zip(hint, questions, strict=True))
    return (f"**Guided:** written with exemplar{'s' if len(hint) != 1 else ''} {seen} of the "
            "run's set as a hint; it learned on the prompt without them.")


def header_markdown(rollout: dict) -> str:
    """Step, stage, exemplars (for a guided rollout, which ones it saw as a hint), reward and
    its breakdown, advantage, question and gold answers."""
    b = rollout.get("breakdown") or {}
    penalties = b.get("penalties") or {}
    penalty_text = ", ".join(f"{markdown_text(name.replace('_', ' '))} −{value:g}"
                             for name, value in penalties.items()) or "none"
    gold = " / ".join(markdown_text(a) for a in rollout.get("golden_answers") or []) or "–"
    guided = guided_line(rollout)
    where = "as a hint" if guided else "in the prompt"
    return (
        f"**Step {shown_step(rollout['step'])}** · stage {rollout['stage'] + 1} · "
        f"{rollout['exemplars']} exemplar{'s' if rollout['exemplars'] != 1 else ''} {where}"
        f" · group {rollout['group']}, sample {rollout['sample']} · rollout #{rollout['id']}  \n"
        + (f"{guided}  \n" if guided else "") +
        f"**Reward {_fmt(rollout['reward'])}** (accuracy {_fmt(b.get('acc'))}, "
        f"format {_fmt(b.get('format'))}; penalties: {penalty_text}) · "
        f"**advantage {_fmt(rollout['advantage'], signed=True)}**  \n"
        f"**Question:** {markdown_text(rollout['question'])}  \n"
        f"**Gold:** {gold} · **model's answer:** {markdown_text(b.get('answer') or '–')}"
    )


def token_rows(rollout: dict) -> list[list]:
    """Per segment: its number, who wrote it, the tag kinds in it, tokens, trained on or not."""
    rows = []
    for n, (segment, parts) in enumerate(segment_parts(rollout), start=1):
        kinds = list(dict.fromkeys(part["kind"] for part in parts))
        trained = {"model": "yes", "env": "no (masked)", "prompt": "no (prompt)"}[segment["source"]]
        rows.append([n, SOURCE_NAMES[segment["source"]], ", ".join(kinds), segment["tokens"],
                     trained, cut_short(segment["text"], 90)])
    return rows


TOKEN_HEADERS = ["#", "written by", "tags", "tokens", "trained on", "text"]


def token_table(rollout: dict) -> str:
    """`token_rows` as a Markdown table (light enough to sit, hidden, in every rollout card)."""
    lines = ["| " + " | ".join(TOKEN_HEADERS) + " |", "|" + "---|" * len(TOKEN_HEADERS)]
    lines += ["| " + " | ".join(markdown_text(v) for v in row) + " |"
              for row in token_rows(rollout)]
    return "\n".join(lines)


def token_summary(rollout: dict) -> str:
    model = sum(s["tokens"] for s in rollout["segments"] if s["source"] == "model")
    env = sum(s["tokens"] for s in rollout["segments"] if s["source"] == "env")
    total = model + env
    share = f"{env / total:.0%}" if total else "–"
    return (f"**{total} response tokens**: {model} written by the model (trained on), "
            f"{env} inserted by the environment (masked, not trained on: {share}).")


# --- token overlays ---------------------------------------------------------------------


@dataclass(frozen=True)
class Overlay:
    """A colour scale behind the tokens: which figure (`key` of the token view), the bucket
    edges (a value goes above every edge it is at or over), the CSS class family (`s`:
    light to dark, `d`: red below zero, grey at it, green above) and what each bucket reads."""

    key: str
    edges: tuple[float, ...]
    family: str
    labels: tuple[str, ...]
    meaning: str


OVERLAY_OFF = "off"
OVERLAYS = {
    # the surprise -log p: darker is a token the policy found less likely
    "log-prob": Overlay("surprise", (0.1, 0.3, 0.7, 1.4, 2.3, 3.5, 5.0), "s",
                        ("p ≥ 0.9", "0.74", "0.5", "0.25", "0.1", "0.03", "0.007",
                         "p < 0.007"),
                        "how likely the model found each token it wrote when it wrote it "
                        "(darker: a less likely pick)"),
    "entropy": Overlay("entropy", (0.1, 0.3, 0.7, 1.2, 2.0, 3.0, 4.5), "s",
                       ("< 0.1", "0.1", "0.3", "0.7", "1.2", "2", "3", "≥ 4.5 nats"),
                       "how unsure the model was about what to write next, whatever it "
                       "picked (darker: more options open)"),
    "advantage": Overlay("advantage", (-1.5, -1.0, -0.5, -0.05, 0.05, 0.5, 1.0, 1.5), "d",
                         ("≤ −1.5", "−1", "−0.5", "< 0", "0", "> 0", "0.5", "1", "≥ 1.5"),
                         "how much training pushes each token up (green) or down (red): "
                         "the rollout's reward against its group's"),
}
OVERLAY_CHOICES = [OVERLAY_OFF, *OVERLAYS]
NO_TOKENS = ("This rollout has no per-token figures (written by veRL, or before the studio "
             "kept them): it is shown without colours.")


def _figure(view: dict, overlay: Overlay, i: int) -> float:
    if overlay.key == "surprise":
        return -view["logprob"][i]
    return view[overlay.key][i]


def bucket_class(name: str, bucket: int) -> str:
    """The CSS class of bucket `bucket` on the scale of overlay `name`, e.g. `log-prob-s3`:
    it takes its colour only while that overlay is chosen (the page's CSS)."""
    return f"{name}-{OVERLAYS[name].family}{bucket}"


def _classes(view: dict, i: int) -> str:
    if not view["mask"][i]:
        return "tok tok-masked"
    return "tok " + " ".join(
        bucket_class(name, bisect_right(overlay.edges, _figure(view, overlay, i)))
        for name, overlay in OVERLAYS.items())


def _title(view: dict, i: int) -> str:
    if not view["mask"][i]:
        return "inserted by the environment: not trained on"
    logprob = view["logprob"][i]
    return (f"log-prob {logprob:.3f} (p {math.exp(logprob):.3f}) · entropy "
            f"{view['entropy'][i]:.3f} · advantage {view['advantage'][i]:+.3f}")


def overlay_html(rollout: dict) -> str:
    """The response token by token, each a span carrying its bucket's class on every
    overlay's scale (`log-prob-s0`, `entropy-s7`, `advantage-d6`...; `tok-masked` for what
    the environment inserted) and its figures in its title, so that choosing an overlay is
    CSS alone (no redraw); as text (`html_text`), line breaks as <br>, on one line so that
    Markdown leaves it one HTML block."""
    view = rollout["token_view"]
    spans = []
    for i, text in enumerate(view["text"]):
        shown = html_text(text).replace("\r", "").replace("\n", "<br>")
        spans.append(f'<span class="{_classes(view, i)}" title="{html_text(_title(view, i))}">'
                     f"{shown}</span>")
    return f'<div class="token-overlay">{"".join(spans)}</div>'


def overlay_legend_html() -> str:
    """Each overlay's scale (a chip per bucket) and what it measures in words; the page's
    CSS shows the chosen overlay's."""
    legends = []
    for name, overlay in OVERLAYS.items():
        chips = "".join(f'<span class="tok {bucket_class(name, i)}">{html_text(label)}</span>'
                        for i, label in enumerate(overlay.labels))
        legends.append(f'<div class="token-legend legend-{name}">{html_text(name)}: '
                       f'{html_text(overlay.meaning)}. {chips}'
                       f'<span class="tok tok-masked">environment (masked)</span></div>')
    return "".join(legends)


# --- the reward per turn -----------------------------------------------------------------


def _contribution(turn: dict, first_call: bool, breakdown: dict) -> str:
    parts = []
    if turn["scored"]:
        parts.append(f"its last answer is the one scored: accuracy {_fmt(breakdown.get('acc'))}"
                     f" (exact match {_fmt(breakdown.get('em'))}, "
                     f"F1 {_fmt(breakdown.get('f1'))})")
    elif turn["answers"]:
        parts.append("an answer a later one replaced (not scored)")
    if first_call:
        parts.append(f"its {turn['calls'][0][0]} call spares the format's 'no search' penalty")
    if turn["think"]:
        parts.append("thinking in <think> counts for format")
    return "; ".join(parts) or "nothing of its own"


def reward_turns_markdown(rollout: dict) -> str:
    """The reward's breakdown per model turn (a table), then how the parts add up. The
    reward is one number per rollout: a turn's row says what in it the reward read."""
    b = rollout.get("breakdown") or {}
    turns = reward_turns(rollout["segments"])
    called = next((t["turn"] for t in turns if t["calls"]), None)
    lines = ["| turn | tokens | thought | tool calls | results back (tokens) | answered "
             "| toward the reward |", "|---|---|---|---|---|---|---|"]
    for t in turns:
        cells = [t["turn"], t["tokens"], "yes" if t["think"] else "no",
                 " / ".join(f"{tool}: {given}" for tool, given in t["calls"]) or "–",
                 t["returned"] or "none", " / ".join(t["answers"]) or "–",
                 _contribution(t, t["turn"] == called, b)]
        lines.append("| " + " | ".join(markdown_text(c) for c in cells) + " |")
    penalties = ", ".join(f"{markdown_text(name.replace('_', ' '))} −{value:g}"
                          for name, value in (b.get("penalties") or {}).items()) or "none"
    lines.append("")
    lines.append(f"**Reward {_fmt(rollout['reward'])}**: accuracy {_fmt(b.get('acc'))} "
                 f"(from the scored answer) and format {_fmt(b.get('format'))} (1 minus the "
                 f"penalties over the whole response: {penalties}), weighted by the run's "
                 f"reward weights.")
    return "\n".join(lines)
