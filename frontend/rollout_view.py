"""A stored rollout as the viewer shows it: tag kinds styled apart, tool output marked as
not trained on (the spans the loss mask zeros), its reward and token counts.

Rollout rows come from the runs services: `segments` are
`{source: prompt | model | env, text, tokens, parts: [{kind, text}]}`. Every registered
tool's tags are styled (search and code calls apart; information and output blocks, the
environment's, alike). Each segment's parts
were parsed alone, so the model's first words after an assistant prefix that opens `<think>`
were stored as plain text; the viewer reads them on from the prefix (`segment_parts`), as
the model wrote them: inside the think span. Steps are shown from 1 (`studio.steps`).
Questions, answers and model output are shown as text (`studio.escaping`): the highlighted
text is a component's text; what goes into Markdown is escaped.
"""

from __future__ import annotations

from studio.escaping import markdown_text
from studio.method.tags import parse
from studio.method.tools import all_specs
from studio.steps import shown_step

NOT_TRAINED = "information (not trained on)"
PREFIX = "prompt prefix"
COLOR_MAP = {
    "think": "#6366f1",
    "search": "#f97316",
    "code": "#0891b2",
    "answer": "#16a34a",
    NOT_TRAINED: "#ca8a04",
    PREFIX: "#6b7280",
}
SOURCE_NAMES = {"prompt": "assistant prefix (from the prompt)", "model": "model",
                "env": "environment"}


def _label(source: str, kind: str) -> str | None:
    """The environment's text (search results, program output, corrective notes) is all
    masked."""
    if source == "env":
        return NOT_TRAINED
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


def header_markdown(rollout: dict) -> str:
    """Step, stage, exemplars, reward and its breakdown, advantage, question and gold answers."""
    b = rollout.get("breakdown") or {}
    penalties = b.get("penalties") or {}
    penalty_text = ", ".join(f"{markdown_text(name.replace('_', ' '))} −{value:g}"
                             for name, value in penalties.items()) or "none"
    gold = " / ".join(markdown_text(a) for a in rollout.get("golden_answers") or []) or "–"
    return (
        f"**Step {shown_step(rollout['step'])}** · stage {rollout['stage'] + 1} · "
        f"{rollout['exemplars']} exemplar{'s' if rollout['exemplars'] != 1 else ''} in the prompt"
        f" · group {rollout['group']}, sample {rollout['sample']}  \n"
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
        preview = " ".join(segment["text"].split())
        rows.append([n, SOURCE_NAMES[segment["source"]], ", ".join(kinds), segment["tokens"],
                     trained, preview[:90] + ("…" if len(preview) > 90 else "")])
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
