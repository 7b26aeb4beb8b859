"""Passages, tokenisation, parameters and the tool's output formats (studio.retrieval)."""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from studio.method.tags import format_information
from studio.retrieval import (
    STOPWORD_LANGUAGES,
    Bm25Params,
    Hit,
    Passage,
    format_hits,
    search_r1_result,
    split_into_passages,
    stream_passages,
    tokenize,
)
from studio.retrieval.passages import MAX_WORD_CHARS
from studio.retrieval.tokenizer import Encoder

# --------------------------------------------------------------------------- split


def words(n: int, start: int = 0) -> str:
    return " ".join(f"w{i}" for i in range(start, start + n))


def test_short_document_is_one_passage_with_the_document_id():
    assert split_into_passages("d1", "Title", "Some  text\nhere.") == [
        Passage("d1", "Title", "Some text here.")
    ]


def test_exactly_n_words_is_one_passage():
    (p,) = split_into_passages("d", "T", words(100))
    assert p.id == "d" and len(p.text.split()) == 100


def test_long_document_is_cut_into_100_word_passages_that_keep_the_title():
    ps = split_into_passages("doc7", "Some Title", words(250))
    assert [p.id for p in ps] == ["doc7#0", "doc7#1", "doc7#2"]
    assert [len(p.text.split()) for p in ps] == [100, 100, 50]
    assert {p.title for p in ps} == {"Some Title"}
    assert ps[0].text == words(100)
    assert ps[1].text == words(100, 100)
    assert ps[2].text == words(50, 200)


def test_101_words_make_two_passages():
    ps = split_into_passages("x", "T", words(101))
    assert [p.id for p in ps] == ["x#0", "x#1"]
    assert ps[1].text == "w100"


def test_custom_passage_length():
    ps = split_into_passages("x", " T ", words(7), words=3)
    assert [p.text for p in ps] == ["w0 w1 w2", "w3 w4 w5", "w6"]
    assert ps[0].title == "T"


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_empty_text_gives_no_passages(text):
    assert split_into_passages("d", "Title", text) == []


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_passage_length_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError):
        split_into_passages("d", "T", "a b c", words=bad)


@given(text=st.text(alphabet="ab é\n\t\u2028🙂", max_size=300),
       cuts=st.lists(st.integers(0, 300), max_size=8), n=st.integers(1, 7))
def test_a_text_in_pieces_gives_the_passages_of_the_whole_text(text, cuts, n):
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    assert list(stream_passages("d", " T ", pieces, n)) == split_into_passages("d", " T ", text, n)


def test_a_word_longer_than_the_limit_is_cut_from_its_start():
    long_word = "a" * (3 * MAX_WORD_CHARS + 5)
    text = f"x {long_word} y"
    expected = ["x", "a" * MAX_WORD_CHARS, "a" * MAX_WORD_CHARS, "a" * MAX_WORD_CHARS, "aaaaa", "y"]
    assert [p.text for p in split_into_passages("d", "T", text, words=1)] == expected
    pieces = [text[i:i + 777] for i in range(0, len(text), 777)]  # the word spans 39 pieces
    assert [p.text for p in stream_passages("d", "T", pieces, words=1)] == expected


# --------------------------------------------------------------------------- tokenize


SENTENCE = "The Eiffel Tower's height was RAISED in 2004, and it is running!"


def test_tokenize_lower_cases_and_drops_english_stop_words():
    assert tokenize([SENTENCE], Bm25Params()) == [
        ["eiffel", "tower", "s", "height", "raised", "2004", "running"]
    ]


def test_tokenize_without_stop_words_keeps_every_word():
    assert tokenize([SENTENCE], Bm25Params(stopwords=None)) == [
        "the eiffel tower s height was raised in 2004 and it is running".split()
    ]


def test_tokenize_with_stemming():
    assert tokenize([SENTENCE], Bm25Params(stemmer="english")) == [
        ["eiffel", "tower", "s", "height", "rais", "2004", "run"]
    ]
    assert tokenize([SENTENCE], Bm25Params(stopwords=None, stemmer="english")) == [
        "the eiffel tower s height was rais in 2004 and it is run".split()
    ]
    # stop words are matched before stemming, as bm25s does: "its" is not a stop
    # word, so it stays (as its stem "it"), while "it" itself goes
    assert tokenize(["it its"], Bm25Params(stemmer="english")) == [["it"]]


def test_tokenize_handles_unicode_punctuation_and_empty_texts():
    assert tokenize(["Über-Straße, São Paulo_2", "", "!!!"], Bm25Params()) == [
        ["über", "straße", "são", "paulo_2"],
        [],
        [],
    ]


def test_tokenize_needs_a_list():
    with pytest.raises(TypeError):
        tokenize("a string", Bm25Params())


@pytest.mark.parametrize(
    "params",
    [Bm25Params(), Bm25Params(stopwords=None), Bm25Params(stemmer="english", stopwords="en_plus")],
)
def test_the_indexing_encoder_tokenises_exactly_like_tokenize(params):
    texts = [SENTENCE, "", "x\x00y and z", "Ünïcode TEXT 42", "the the the"]
    encoder = Encoder(params)
    ids, lengths = encoder.encode(texts)
    vocab = encoder.tokens()
    flat = [vocab[i] for i in ids.tolist()]
    out, start = [], 0
    for n in lengths.tolist():
        out.append(flat[start : start + n])
        start += n
    expected = tokenize([t.replace("\x00", " ") for t in texts], params)
    assert out == expected


# --------------------------------------------------------------------------- params


def test_params_are_json_ready_and_round_trip():
    p = Bm25Params(k1=1.2, b=0.5, stopwords=None, stemmer="english")
    d = dataclasses.asdict(p)
    assert d == {"k1": 1.2, "b": 0.5, "stopwords": None, "stemmer": "english"}
    assert Bm25Params.from_dict(json.loads(json.dumps(d))) == p
    assert Bm25Params.from_dict({}) == Bm25Params()
    assert Bm25Params(k1=2).k1 == 2.0 and isinstance(Bm25Params(k1=2).k1, float)
    assert "en" in STOPWORD_LANGUAGES


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"k1": -1}, "k1 must be >= 0"),
        ({"k1": "1.5"}, "k1 must be a number"),
        ({"k1": float("nan")}, "k1 must be finite"),
        ({"b": 1.5}, "b must be between 0 and 1"),
        ({"b": None}, "b must be a number"),
        ({"stopwords": "klingon"}, "stopwords must be None or one of"),
        ({"stopwords": 1}, "stopwords must be a string or null"),
        ({"stemmer": "klingon"}, "stemmer must be None or a PyStemmer algorithm"),
        ({"k3": 1}, "unknown field(s) 'k3'"),
    ],
)
def test_bad_params_give_clear_errors(data, message):
    with pytest.raises(ValueError) as e:
        Bm25Params.from_dict(data)
    assert message in str(e.value)


def test_from_dict_needs_a_mapping():
    with pytest.raises(ValueError):
        Bm25Params.from_dict([("k1", 1.0)])


# --------------------------------------------------------------------------- formats


HITS = [
    Hit(Passage("12", "Eiffel Tower", "The tower is 330 m tall."), 7.25),
    Hit(Passage("3#1", "Paris", "Paris is the capital of France."), 3.5),
]


def test_format_hits_is_the_search_r1_information_text():
    assert format_hits(HITS) == (
        "Doc 1(Title: Eiffel Tower) The tower is 330 m tall.\n"
        "Doc 2(Title: Paris) Paris is the capital of France."
    )
    assert format_hits([]) == ""


def test_format_hits_is_what_the_method_core_wraps():
    body = format_hits(HITS)
    assert format_information((h.passage.title, h.passage.text) for h in HITS) == (
        f"\n\n<information>{body}</information>\n\n"
    )


def test_format_hits_defuses_a_closing_information_tag_in_a_passage():
    hit = Hit(Passage("1", "T", "a </information> b"), 1.0)
    assert format_hits([hit]) == "Doc 1(Title: T) a </ information> b"


def test_search_r1_result_with_scores():
    assert search_r1_result(HITS, return_scores=True) == [
        {
            "document": {"id": "12", "contents": '"Eiffel Tower"\nThe tower is 330 m tall.'},
            "score": 7.25,
        },
        {
            "document": {"id": "3#1", "contents": '"Paris"\nParis is the capital of France.'},
            "score": 3.5,
        },
    ]


def test_search_r1_result_without_scores_lists_the_bare_documents():
    assert search_r1_result(HITS, return_scores=False) == [
        {"id": "12", "contents": '"Eiffel Tower"\nThe tower is 330 m tall.'},
        {"id": "3#1", "contents": '"Paris"\nParis is the capital of France.'},
    ]
    assert search_r1_result([], return_scores=True) == []


def test_search_r1_result_is_json_as_it_is():
    # plain dicts, lists, strings and floats: JSON gives back exactly what was built
    body = {"result": [search_r1_result(HITS, True)]}
    assert json.loads(json.dumps(body)) == body
    assert all(type(item["score"]) is float for item in body["result"][0])
