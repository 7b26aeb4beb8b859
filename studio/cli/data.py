"""The studio's data outside the groups: `studio demo` (load a data pack) and `studio doctor`
(check a corpus against a QA set or an exemplar set)."""

from __future__ import annotations

from pathlib import Path

import typer

from studio.cli.common import DataDir, acting_user, call, fail, studio_ready


def demo(data_dir: Path = DataDir,
         math: bool = typer.Option(False, "--math", help="Load the math pack for the python "
                                   "tool instead: QA sets `math` and `math-heldout`, exemplar "
                                   "set `math`, no corpus."),
         calc: bool = typer.Option(False, "--calc", help="Load the arithmetic pack for the "
                                   "calculator tool instead: QA sets `calc` and `calc-heldout`, "
                                   "exemplar set `calc`, no corpus.")) -> None:
    """Load the demo pack: a corpus, a QA set and an exemplar set named `demo`, the
    held-out questions as the QA set `demo-heldout`, and the short-answer questions as
    `demo-span` and `demo-span-heldout` (with --math: the math pack; with --calc: the
    arithmetic pack)."""
    from studio.services.demo import load_calc_pack, load_demo_pack, load_math_pack
    from studio.services.errors import UserError

    if math and calc:
        raise fail(ValueError("--math, --calc: one pack at a time"))
    settings = studio_ready(data_dir)
    try:
        if math or calc:
            pack = (load_math_pack if math else load_calc_pack)(settings, acting_user(settings))
        else:
            pack = load_demo_pack(settings, acting_user(settings), index_now=True)
    except UserError as exc:
        raise fail(exc) from None
    qa, exemplars, heldout = pack["qa_set"], pack["exemplar_set"], pack["heldout_qa_set"]
    if "corpus" in pack:
        corpus = pack["corpus"]
        typer.echo(f"corpus '{corpus['name']}': {corpus['num_documents']} documents, "
                   f"{corpus['num_passages']} passages, {corpus['status']}")
    typer.echo(f"QA set '{qa['name']}': {qa['num_rows']} questions to train on")
    typer.echo(f"QA set '{heldout['name']}': {heldout['num_rows']} held-out questions to "
               f"evaluate on (never in '{qa['name']}')")
    if "span_qa_set" in pack:
        spans, held_spans = pack["span_qa_set"], pack["span_heldout_qa_set"]
        typer.echo(f"QA set '{spans['name']}': {spans['num_rows']} short-answer questions to "
                   "train on (a date, a count or a name from one passage)")
        typer.echo(f"QA set '{held_spans['name']}': {held_spans['num_rows']} held-out "
                   f"short-answer questions to evaluate on (never in '{spans['name']}')")
    typer.echo(f"exemplar set '{exemplars['name']}': {exemplars['size']} exemplars, "
               f"{exemplars['errors']} errors, {exemplars['warnings']} warnings")


def doctor(corpus: str = typer.Option(..., "--corpus", help="The corpus's name."),
           qa: str = typer.Option(None, "--qa", help="A QA set's name: answer reachability."),
           exemplars: str = typer.Option(None, "--exemplars",
                                         help="An exemplar set's name: exemplar replay."),
           k: int = typer.Option(3, "--k", help="Passages per search, as the run's grpo.top_k."),
           limit: int = typer.Option(5000, "--limit", help="Questions checked at most (a "
                                     "larger set is sampled evenly)."),
           data_dir: Path = DataDir) -> None:
    """The data doctor: how many questions find their answer by searching the question
    itself, and whether the exemplars show passages this corpus returns (docs/data-doctor.md)."""
    from studio.services import corpora, data_doctor, exemplar_sets, qa_sets

    if qa is None and exemplars is None:
        raise fail(ValueError("give --qa NAME, --exemplars NAME or both"))
    settings = studio_ready(data_dir)
    corpus_id = call(corpora.find_corpus, settings, corpus, prefix="--corpus: ")["id"]
    if qa is not None:
        qa_id = call(qa_sets.find_qa_set, settings, qa, prefix="--qa: ")["id"]
        report = call(data_doctor.reachability, settings, corpus_id, qa_id, k=k, limit=limit,
                      on_progress=lambda done, total: typer.echo(
                          f"searched {done} of {total} questions", err=True))
        for line in data_doctor.reachability_lines(report):
            typer.echo(line)
        for worst in report["worst"]:
            typer.echo(f"  unreachable: {worst['question']} (answers: "
                       f"{' | '.join(worst['golden_answers'])}; retrieved: "
                       f"{', '.join(worst['retrieved']) or 'nothing'})")
    if exemplars is not None:
        set_id = call(exemplar_sets.find_exemplar_set, settings, exemplars,
                      prefix="--exemplars: ")["id"]
        for line in data_doctor.replay_lines(
                call(data_doctor.exemplar_replay, settings, corpus_id, set_id, k=k)):
            typer.echo(line)
