"""The data doctor's pure checks: an answer matched as the reward matches, hops in order,
and an exemplar's information blocks against what the corpus returns."""

from __future__ import annotations

from studio.method.exemplars import Exemplar
from studio.method.reachability import (
    Reach,
    answer_rank,
    hop_titles,
    parse_information,
    reach,
    replay_findings,
    summarize,
    written_searches,
)
from studio.method.reward import contains_answer, exact_match


def test_an_answer_is_found_with_the_rewards_normalisation_as_whole_words():
    assert contains_answer("Founded by THE Aldous Brindle, in 1402.", ["aldous brindle"])
    assert contains_answer("It lies on the Isle of Serrick!", ["an isle of serrick"])
    assert not contains_answer("the 1990s were long", ["1990"]), "whole words only"
    assert not contains_answer("anything at all", ["", "  "]), "an empty gold is never found"
    # found means: copying that span would score acc = 1
    assert exact_match("Isle of Serrick", ["an isle of serrick"]) == 1.0


def test_the_rank_is_the_first_passage_holding_an_answer_title_included():
    passages = [("Lowgarth", "A fishing village."), ("Aldous Brindle", "A fisherman."),
                ("Brindlecombe", "Founded by Aldous Brindle.")]
    assert answer_rank(passages, ["Aldous Brindle"]) == 2
    assert answer_rank(passages, ["Pellam Strood"]) is None
    found = reach(passages, ["fisherman"], ["brindlecombe", "Serrick"])
    assert found == Reach(2, (True, False)) and found.reachable


def test_musique_hops_follow_the_decomposition_not_the_paragraph_order():
    meta = {"supporting_titles": ["Early", "Late"],
            "question_decomposition": [{"paragraph_support_idx": 9},
                                       {"paragraph_support_idx": 2}]}
    assert hop_titles(meta) == ["Late", "Early"]
    assert hop_titles({"supporting_titles": ["A", "B"]}) == ["A", "B"]  # HotpotQA
    assert hop_titles({}) == []  # a plain question/answer file keeps no hops


def test_the_summary_counts_each_hop_over_the_questions_that_have_it():
    figures = summarize([Reach(1, (True, True)), Reach(None, (True, False, False)),
                         Reach(None, ())])
    assert (figures["questions"], figures["reachable"], figures["share"]) == (3, 1, 0.3333)
    assert figures["hops"] == [{"hop": 1, "questions": 2, "found": 2, "share": 1.0},
                               {"hop": 2, "questions": 2, "found": 1, "share": 0.5},
                               {"hop": 3, "questions": 1, "found": 0, "share": 0.0}]
    assert (figures["all_hops_found"], figures["all_hops_share"]) == (1, 0.5)
    assert summarize([])["share"] is None


SOLUTION = ("<think>Find it.</think>\n<search> Nettlebarrow island </search>\n\n"
            "<information>Doc 1(Title: Nettlebarrow) Nettlebarrow is on Serrick.\n"
            "Doc 2(Title: Serrick (island)) Serrick is a low island.</information>\n\n"
            "<search> Serrick towns </search>\n\n<information>Four towns.</information>\n\n"
            "<answer> Serrick </answer>")


def test_an_exemplars_searches_pair_with_the_blocks_written_after_them():
    first, second = written_searches(SOLUTION)
    assert first.query == "Nettlebarrow island"
    assert first.passages == (("Nettlebarrow", "Nettlebarrow is on Serrick."),
                              ("Serrick (island)", "Serrick is a low island."))
    assert second.passages == (("", "Four towns."),)
    assert parse_information("") == []


def test_replay_flags_blocks_the_corpus_cannot_produce_and_an_answer_it_never_shows():
    exemplar = Exemplar("Where is Nettlebarrow?", SOLUTION, "Serrick")
    returned = [[("Nettlebarrow", "Nettlebarrow  is on Serrick. It has eels."),
                 ("Serrick (island)", "Serrick is a low island.")],
                [("Towns", "Three towns and a marsh.")]]
    assert replay_findings(exemplar, returned) == [
        "search 2 'Serrick towns': 1 of the 1 passages written after it are not what the "
        "corpus returns ((untitled)); it returns 'Towns'"]
    elsewhere = [[("Harbour", "Boats.")], []]
    assert replay_findings(exemplar, elsewhere) == [
        "search 1 'Nettlebarrow island': 2 of the 2 passages written after it are not what "
        "the corpus returns ('Nettlebarrow', 'Serrick (island)'); it returns 'Harbour'",
        "search 2 'Serrick towns': the corpus returns no passage for it",
        "the answer 'Serrick' is in none of the passages the corpus returns for its searches"]
