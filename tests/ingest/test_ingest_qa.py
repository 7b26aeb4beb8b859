"""QA readers (FlashRAG, HotpotQA, MuSiQue, CSV), their report, their errors, and split_qa."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from studio.ingest import QA_FORMATS, IngestError, Limits, QARow, read_qa, split_qa
from studio.ingest.qa import REPORT_EXAMPLES, detect_schema, split_aliases
from tests.support.shared_data import SHARED


def put(tmp_path: Path, data: str | bytes) -> Path:
    path = tmp_path / "upload-77c1"
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def lines(*objs) -> str:
    return "".join(json.dumps(o) + "\n" for o in objs)


def error(tmp_path: Path, data: str | bytes, filename: str, **kwargs) -> IngestError:
    with pytest.raises(IngestError) as info:
        read_qa(put(tmp_path, data), filename, **kwargs)
    return info.value


# --- FlashRAG JSONL --------------------------------------------------------------------


def test_flashrag_answer_variants_and_meta(tmp_path: Path):
    data = lines(
        {"id": "q1", "question": " Who? ", "golden_answers": [" A ", "B", "A", ""],
         "metadata": {"k": 1}},
        {"id": 2, "question": "How many?", "answer": 35},
        {"question": "Which?", "answers": "C", "split": "dev"},
    )
    result = read_qa(put(tmp_path, data), "my qa.jsonl")
    assert result.fmt == "flashrag-jsonl"
    assert result.rows == [
        QARow("q1", "Who?", ["A", "B"], {"metadata": {"k": 1}}),
        QARow("2", "How many?", ["35"], {}),
        QARow("my qa-3", "Which?", ["C"], {"split": "dev"}),
    ]
    assert result.report == {"count": 3, "duplicate_questions": [], "empty_answers": [],
                             "unanswerable": [], "duplicate_question_count": 0,
                             "empty_answer_count": 0, "unanswerable_count": 0,
                             "generated_ids": 1, "answers_per_question": 1.333}


def test_flashrag_json_array(tmp_path: Path):
    data = json.dumps([{"id": "a", "question": "Q1?", "golden_answers": ["x"]},
                       {"id": "b", "question": "Q2?", "golden_answers": ["y"]}], indent=2)
    result = read_qa(put(tmp_path, data), "qa.json")
    assert result.fmt == "flashrag-jsonl"
    assert [r.id for r in result.rows] == ["a", "b"]


def test_report_duplicates_and_empty_answers(tmp_path: Path):
    data = lines(
        {"id": "1", "question": "Who wrote  Hamlet?", "golden_answers": ["Shakespeare"]},
        {"id": "2", "question": "What is 2+2?", "golden_answers": []},
        {"id": "3", "question": "who WROTE hamlet?", "golden_answers": ["W. Shakespeare"]},
        {"id": "4", "question": "Capital of France?", "answer": "  "},
        {"id": "5", "question": "\twho wrote hamlet? ", "golden_answers": ["S"]},
    )
    result = read_qa(put(tmp_path, "\n" + data), "qa.jsonl")
    assert len(result.rows) == 5
    assert result.rows[1].golden_answers == [] and result.rows[3].golden_answers == []
    assert result.report["duplicate_questions"] == [
        {"row": 3, "line": 4, "first_row": 1, "first_line": 2, "question": "who WROTE hamlet?"},
        {"row": 5, "line": 6, "first_row": 1, "first_line": 2, "question": "who wrote hamlet?"},
    ]
    assert result.report["empty_answers"] == [{"row": 2, "line": 3, "id": "2"},
                                              {"row": 4, "line": 5, "id": "4"}]
    assert result.report["duplicate_question_count"] == 2
    assert result.report["empty_answer_count"] == 2


def test_report_lists_are_capped(tmp_path: Path):
    data = lines(*({"question": "Same?", "answer": ""} for _ in range(REPORT_EXAMPLES + 5)))
    report = read_qa(put(tmp_path, data), "qa.jsonl").report
    assert len(report["duplicate_questions"]) == REPORT_EXAMPLES
    assert report["duplicate_question_count"] == REPORT_EXAMPLES + 4
    assert len(report["empty_answers"]) == REPORT_EXAMPLES
    assert report["empty_answer_count"] == REPORT_EXAMPLES + 5


def test_flashrag_errors(tmp_path: Path):
    err = error(tmp_path, lines({"question": "ok?", "answer": "a"}, {"q": "x", "answer": "a"}),
                "qa.jsonl")
    assert str(err) == ('qa.jsonl line 2: field "question" is missing (found "q", "answer"); '
                        'each row needs {"question": ..., "golden_answers": [...]}')
    assert (err.line, err.field) == (2, "question")
    err = error(tmp_path, lines({"question": "  ", "answer": "a"}), "qa.jsonl")
    assert str(err) == ('qa.jsonl line 1: field "question" is empty; write the question or '
                        "remove the row")
    err = error(tmp_path, lines({"question": 5, "answer": "a"}), "qa.jsonl")
    assert str(err) == 'qa.jsonl line 1: field "question" must be a string, found a number'
    err = error(tmp_path, lines({"id": "1", "question": "Q?"}), "qa.jsonl")
    assert str(err) == ('qa.jsonl line 1: field "golden_answers" is missing (found "id", '
                        '"question"); each row needs {"question": ..., "golden_answers": [...]} '
                        '(or "answer": "...")')
    err = error(tmp_path, lines({"question": "Q?", "golden_answers": [["a"]]}), "qa.jsonl")
    assert str(err) == ('qa.jsonl line 1: field "golden_answers" must be a string or a list of '
                        "strings, found a nested list")
    err = error(tmp_path, lines({"question": "Q?", "answer": True}), "qa.jsonl")
    assert str(err) == ('qa.jsonl line 1: field "answer" must be a string or a list of strings, '
                        "found true/false")
    err = error(tmp_path, '{"question": "Q?", "answer": "a"}\n{"question": "R?", answer: 1}\n',
                "qa.jsonl")
    assert str(err) == ("qa.jsonl line 2: not valid JSON (Expecting property name enclosed in "
                        "double quotes at column 20); each line must hold one whole JSON object "
                        "(one question)")
    err = error(tmp_path, '{"question": "Q?", "answer": "a"}\n"just a string"\n', "qa.jsonl")
    assert str(err) == ('qa.jsonl line 2: expected a JSON object, found a string; each line '
                        'needs {"question": ..., "golden_answers": [...]}')


def test_duplicate_ids_are_an_error(tmp_path: Path):
    data = lines({"id": "a", "question": "Q1?", "answer": "x"},
                 {"id": "b", "question": "Q2?", "answer": "y"},
                 {"id": "a", "question": "Q3?", "answer": "z"})
    err = error(tmp_path, data, "qa.jsonl")
    assert str(err) == ('qa.jsonl line 3: id "a" is already used by row 1 (line 1); ids must be '
                        "unique: rename one, or leave out the ids and the studio numbers the rows")
    assert err.field == "id"


# --- HotpotQA and MuSiQue --------------------------------------------------------------


def test_hotpotqa_small(tmp_path: Path):
    data = json.dumps([{
        "_id": "h1", "question": "Were both American?", "answer": "yes", "type": "comparison",
        "level": "easy", "supporting_facts": [["A", 0], ["B", 1], ["A", 2]],
        "context": [["A", ["s1"]], ["B", ["s2"]]]}])
    result = read_qa(put(tmp_path, data), "hotpot.json")
    assert result.fmt == "hotpotqa-json"
    assert result.rows == [QARow("h1", "Were both American?", ["yes"], {
        "type": "comparison", "level": "easy",
        "supporting_facts": [["A", 0], ["B", 1], ["A", 2]], "supporting_titles": ["A", "B"]})]


def test_hotpotqa_errors(tmp_path: Path):
    data = json.dumps([
        {"_id": "h1", "question": "Q1?", "answer": "a", "supporting_facts": []},
        {"_id": "h2", "question": "Q2?", "supporting_facts": [], "context": []}], indent=1)
    err = error(tmp_path, data, "hotpot_test.json")
    assert str(err) == ('hotpot_test.json item 2 (line 8): field "answer" is missing; HotpotQA '
                        'rows need "question" and "answer" (the test set has no answers and '
                        "cannot be used)")
    assert (err.item, err.line, err.field) == (2, 8, "answer")


def test_musique_small_and_unanswerable(tmp_path: Path):
    data = lines(
        {"id": "m1", "question": "Q1?", "answer": "Paris", "answer_aliases": ["Paris", "City"],
         "answerable": True, "paragraphs": [
             {"idx": 0, "title": "T0", "paragraph_text": "x", "is_supporting": False},
             {"idx": 1, "title": "T1", "paragraph_text": "y", "is_supporting": True}]},
        {"id": "m2", "question": "Q2?", "answer": "", "answer_aliases": [],
         "answerable": False, "paragraphs": []})
    result = read_qa(put(tmp_path, data), "musique_full.jsonl")
    assert result.fmt == "musique-json"
    assert result.rows[0] == QARow("m1", "Q1?", ["Paris", "City"],
                                   {"answerable": True, "supporting_titles": ["T1"]})
    assert result.report["unanswerable"] == [{"row": 2, "line": 2, "id": "m2"}]
    assert result.report["empty_answers"] == [{"row": 2, "line": 2, "id": "m2"}]


def test_detect_schema():
    assert detect_schema({"id": 1, "question": "q", "golden_answers": []}) == "flashrag-jsonl"
    assert detect_schema({"_id": 1, "question": "q", "answer": "a"}) == "hotpotqa-json"
    assert detect_schema({"id": 1, "question": "q", "answer": "a",
                          "answer_aliases": []}) == "musique-json"


# --- CSV -------------------------------------------------------------------------------


def test_csv_with_aliases_and_extra_columns(tmp_path: Path):
    data = ("\ufeffID,Question,Answer,Aliases,source\n"
            'q1,"Who painted the Mona Lisa?",Leonardo da Vinci,Leonardo|da Vinci| ,wiki\n'
            "q2,What is 1|2?,1\\|2,one or two\\|x,quiz\n"
            ",Empty answer?,,,x\n")
    result = read_qa(put(tmp_path, data), "qa.csv")
    assert result.fmt == "csv"
    assert result.rows == [
        QARow("q1", "Who painted the Mona Lisa?", ["Leonardo da Vinci", "Leonardo", "da Vinci"],
              {"source": "wiki"}),
        QARow("q2", "What is 1|2?", ["1\\|2", "one or two|x"], {"source": "quiz"}),
        QARow("qa-4", "Empty answer?", [], {"source": "x"}),
    ]
    assert result.report["empty_answers"] == [{"row": 3, "line": 4, "id": "qa-4"}]
    assert split_aliases("a|b\\|c") == ["a", "b|c"]


def test_csv_answers_column_may_hold_a_json_list(tmp_path: Path):
    data = 'question,golden_answers\nQ?,"[""a"", ""b""]"\nR?,[not json\n'
    rows = read_qa(put(tmp_path, data), "qa.csv").rows
    assert rows[0].golden_answers == ["a", "b"]
    assert rows[1].golden_answers == ["[not json"]


def test_tsv_and_explicit_csv_format(tmp_path: Path):
    rows = read_qa(put(tmp_path, "query\tanswer\nQ?\tA\n"), "qa.tsv").rows
    assert rows == [QARow("qa-2", "Q?", ["A"], {})]
    result = read_qa(put(tmp_path, "question;answer\nQ?;A, B\n"), "export.txt", fmt="csv")
    assert result.fmt == "csv" and result.rows[0].golden_answers == ["A, B"]


def test_csv_errors(tmp_path: Path):
    err = error(tmp_path, "Frage,Antwort\nQ?,A\n", "qa.csv")
    assert str(err) == ('qa.csv line 1: no "question" and no "answer" column: the header has '
                        '"Frage", "Antwort"; the first line must name the columns '
                        'question,answer (and optionally aliases, separated by "|", and id)')
    assert err.field == "question"
    err = error(tmp_path, "question,solution\nQ?,A\n", "qa.csv")
    assert str(err).startswith('qa.csv line 1: no "answer" column: the header has "question", '
                               '"solution"; ')
    err = error(tmp_path, "question,answer\nQ?,A\n ,B\n", "qa.csv")
    assert str(err) == ('qa.csv line 3: column "question" is empty; write the question or '
                        "remove the row")
    assert (err.line, err.field) == (3, "question")
    err = error(tmp_path, "question,answer\nQ?,A,extra\n", "qa.csv")
    assert str(err) == ("qa.csv line 2: 3 cells but the header has 2 columns (separated by ','); "
                        "put cells holding the separator in double quotes")
    err = error(tmp_path, "question,answer\n", "qa.csv")
    assert str(err) == "qa.csv: no questions found; the file holds only blank lines or a header"
    err = error(tmp_path, "question,answer\nQui êtes-vous?,moi\n".encode("cp1252"), "qa.csv")
    assert str(err).startswith("qa.csv line 2: not UTF-8 text (byte 0xEA at column 5); it looks "
                               "like Windows-1252/Latin-1 text; save the file as UTF-8")


# --- file-level errors and limits ------------------------------------------------------


def test_file_level_errors(tmp_path: Path):
    err = error(tmp_path, b"", "qa.jsonl")
    assert str(err) == "qa.jsonl: the file is empty; upload a file with questions in it"
    err = error(tmp_path, "\n\n", "qa.jsonl")
    assert str(err) == "qa.jsonl: no questions found; the file holds only blank lines or a header"
    err = error(tmp_path, "[]", "qa.json")
    assert str(err) == "qa.json: no questions found; the file holds only blank lines or a header"
    err = error(tmp_path, "Q?,A", "qa.xlsx")
    assert str(err) == ('qa.xlsx: unsupported file type (".xlsx"); upload QA as JSONL (.jsonl), '
                        "JSON (.json) or CSV (.csv, .tsv)")
    err = error(tmp_path, lines({"question": "Q?", "answer": "A"}), "qa.jsonl", fmt="squad")
    assert str(err) == ("qa.jsonl: unknown QA format 'squad'; choose one of flashrag-jsonl, "
                        "hotpotqa-json, musique-json, csv or leave it out to detect it")
    assert set(QA_FORMATS) == {"flashrag-jsonl", "hotpotqa-json", "musique-json", "csv"}
    # JSON without a known suffix is still read
    result = read_qa(put(tmp_path, lines({"question": "Q?", "answer": "A"})), "download")
    assert result.rows[0].golden_answers == ["A"]


def test_qa_limits(tmp_path: Path):
    data = lines(*({"question": f"Q{i}?", "answer": "a"} for i in range(3)))
    err = error(tmp_path, data, "qa.jsonl", limits=Limits(max_rows=2))
    assert str(err) == ("qa.jsonl line 3: more than 2 questions, the limit for one upload "
                        "(setting STUDIO_MAX_UPLOAD_ROWS); split the file or raise the limit")
    err = error(tmp_path, data, "qa.jsonl", limits=Limits(max_bytes=20))
    assert str(err) == (f"qa.jsonl: the file is {len(data)} bytes, more than the upload limit "
                        "of 20 bytes (setting STUDIO_MAX_UPLOAD_BYTES); split it into smaller "
                        "uploads or raise the limit")


def test_utf16_qa_file(tmp_path: Path):
    data = lines({"question": "Où?", "answer": "Là"}).encode("utf-16")
    assert read_qa(put(tmp_path, data), "qa.jsonl").rows[0].golden_answers == ["Là"]
    data = json.dumps([{"question": "Où?", "answer": "Là"}]).encode("utf-8-sig")
    assert read_qa(put(tmp_path, data), "qa.json").rows[0].question == "Où?"


# --- split_qa --------------------------------------------------------------------------


def _rows(n: int) -> list[QARow]:
    return [QARow(f"r{i}", f"Question number {i}?", [str(i)], {}) for i in range(n)]


def test_split_is_deterministic_disjoint_and_complete():
    rows = _rows(100)
    train, evaluation = split_qa(rows, 0.2, seed=7)
    assert len(evaluation) == 20 and len(train) == 80
    assert {r.id for r in train}.isdisjoint({r.id for r in evaluation})
    assert {r.id for r in train} | {r.id for r in evaluation} == {r.id for r in rows}
    assert split_qa(rows, 0.2, seed=7) == (train, evaluation)
    assert split_qa(list(reversed(rows)), 0.2, seed=7)[1] == list(reversed(evaluation))
    assert split_qa(rows, 0.2, seed=8)[1] != evaluation
    order = [r.id for r in rows]
    assert [r.id for r in train] == [i for i in order if i in {r.id for r in train}]


def test_split_is_stable_across_runs():
    # The split hashes the seed and the question with SHA-256: fixed on every machine.
    evaluation = split_qa(_rows(10), 0.3, seed=0)[1]
    assert [r.id for r in evaluation] == [r.id for r in split_qa(_rows(10), 0.3, seed=0)[1]]
    assert len(evaluation) == 3


def test_split_edges():
    rows = _rows(5)
    assert split_qa(rows, 0.0, 1) == (rows, [])
    assert split_qa(rows, 1.0, 1) == ([], rows)
    assert split_qa([], 0.5, 1) == ([], [])
    with pytest.raises(ValueError, match="between 0 and 1"):
        split_qa(rows, 1.5, 1)


def test_split_keeps_duplicate_questions_on_one_side():
    rows = [QARow(f"r{i}", f"Question {i % 10}?" if i % 3 == 0 else f"Unique {i}?", ["a"], {})
            for i in range(60)]
    for seed in range(20):
        train, evaluation = split_qa(rows, 0.25, seed)
        train_q = {" ".join(r.question.split()).casefold() for r in train}
        assert all(" ".join(r.question.split()).casefold() not in train_q for r in evaluation)
        assert len(train) + len(evaluation) == 60


@pytest.mark.skipif(not SHARED.is_dir(), reason="no shared data")
def test_split_of_popqa_keeps_its_duplicates_together():
    path = SHARED / "qa-only" / "popqa-test-1000.jsonl"
    rows = read_qa(path, path.name).rows
    train, evaluation = split_qa(rows, 0.1, seed=3)
    assert len(evaluation) == 100 and len(train) == 900
    train_q = {r.question.casefold() for r in train}
    assert not any(r.question.casefold() in train_q for r in evaluation)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 60), fraction=st.floats(0, 1), seed=st.integers(0, 2**32),
       dup_every=st.integers(2, 7))
def test_split_properties(n: int, fraction: float, seed: int, dup_every: int):
    rows = [QARow(str(i), f"q{i // dup_every if i % 2 else i}", [], {}) for i in range(n)]
    train, evaluation = split_qa(rows, fraction, seed)
    ids = [r.id for r in train] + [r.id for r in evaluation]
    assert sorted(ids, key=int) == [r.id for r in rows]
    assert len(evaluation) <= round(n * fraction)
    assert (train, evaluation) == split_qa(rows, fraction, seed)


def test_missing_question_hint_follows_the_format(tmp_path: Path):
    err = error(tmp_path, json.dumps([{"_id": "h", "answer": "a", "supporting_facts": []}]),
                "hotpot.json")
    assert str(err) == ('hotpot.json item 1 (line 1): field "question" is missing (found "_id", '
                        '"answer", "supporting_facts"); each row needs {"_id": ..., '
                        '"question": ..., "answer": ...}')
    err = error(tmp_path, lines({"id": "m", "answer": "a", "answer_aliases": []}), "m.jsonl")
    assert str(err).endswith('each row needs {"id": ..., "question": ..., "answer": ..., '
                             '"answer_aliases": [...]}')
