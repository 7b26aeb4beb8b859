"""`studio exemplars`: exemplar sets, drafted from a QA set."""

from __future__ import annotations

from pathlib import Path

import typer

from studio.cli.common import DataDir, acting_user, call, studio_ready
from studio.method.tools import drafted_tools

exemplars_app = typer.Typer(help="Exemplar sets: draft them from a QA set.",
                            no_args_is_help=True)


@exemplars_app.command("draft")
def exemplars_draft(
        qa_set: str = typer.Option(..., "--qa-set", help="The QA set whose questions to draft."),
        tool: str = typer.Option(drafted_tools()[0], help=" | ".join(drafted_tools())),
        corpus: str = typer.Option(None, help="The corpus search drafts search."),
        count: int = typer.Option(3, help="How many drafts (1 to 10)."),
        k: int = typer.Option(3, help="Passages a search returns."),
        out: Path = typer.Option(None, help="Write the drafts here as JSONL (default: stdout); "
                                 "upload the file as an exemplar set once read and edited."),
        data_dir: Path = DataDir) -> None:
    """Exemplar drafts from a QA set, with the tool's real results inside; each draft's
    findings (what to fix before training on it) go to stderr."""
    import json

    from studio.services.exemplar_drafts import draft_exemplars

    settings = studio_ready(data_dir)
    drafted = call(draft_exemplars, settings, acting_user(settings), qa_set=qa_set, tool=tool,
                   corpus=corpus, count=count, k=k)
    lines = "".join(json.dumps({key: d[key] for key in ("question", "solution", "answer")})
                    + "\n" for d in drafted["drafts"])
    if out:
        out.write_text(lines, encoding="utf-8")
    else:
        typer.echo(lines, nl=False)
    typer.echo(f"{len(drafted['drafts'])} drafts from {drafted['scanned']} questions read, "
               f"{drafted['gaps']} with a part left for you to write", err=True)
    for number, d in enumerate(drafted["drafts"], 1):
        for finding in d["findings"]:
            typer.echo(f"draft {number}: {finding['severity']}: {finding['message']}", err=True)
