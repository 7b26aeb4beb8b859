"""Multi-turn tool rollouts of the native engine (worker/engines/native/rollout.py).

Most tests drive the engine with a *scripted* model: it stores each row's
token ids in the engine's KV cache as its "keys", reads the row's whole
visible context back from the cache on every call (so the engine's cache
bookkeeping - parking, swapping, compacting, appending environment tokens -
is what it sees), checks the position ids, and forces the next token of a
script chosen by the prompt.  The tiny random Llama checks the real
attention path (greedy tokens equal the argmax of a plain full-context
forward); one test runs the real SmolLM2-135M-Instruct with BM25 search.
"""

from __future__ import annotations

import json

import pytest
import torch

import worker.engines.native.rollout as rollout_module
from studio import demo
from studio.method import tags
from studio.method.prompt import common_prefix_length
from studio.method.rollouts import Rollout, Segment, rollout_segments, tool_counts
from studio.method.tools import PythonTool, SearchTool
from studio.retrieval import Passage, build_index
from studio.sandbox import Sandbox
from tests.support.reverse_tool import ReverseTool
from tests.support.scripted_rollouts import (
    CORPUS,
    EOS,
    INFO_END,
    RecordingSearch,
    ScriptedLM,
    prompt_ids,
    run_scripted,
)
from tests.support.shared_data import HOTPOT_TRAIN
from tests.support.tiny_model import build_tiny_model
from worker.engines.native import attention
from worker.engines.native.rollout import RolloutConfig, generate_rollouts

torch.set_num_threads(1)

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = build_tiny_model(tmp_path_factory.mktemp("tiny"))
    model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    return model, AutoTokenizer.from_pretrained(str(folder))


@pytest.fixture(scope="module")
def scrambled(tiny):
    """The tiny model with large random weights: its greedy text varies with the context
    (the freshly initialised one repeats one token), and its logits have no near-ties."""
    import copy

    model = copy.deepcopy(tiny[0])
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return model, tiny[1]


@pytest.fixture(scope="module")
def tokenizer(tiny):
    return tiny[1]


@pytest.fixture(scope="module")
def index():
    return build_index(CORPUS)


def check_mask(rollout: Rollout, tokenizer) -> None:
    """Mask = 1 exactly over the model's tokens, 0 over every environment token."""
    ids, mask = rollout.response_ids, rollout.response_mask
    assert len(ids) == len(mask)
    model_segs = [s for s in rollout.segments if s.source == "model"]
    env_segs = [s for s in rollout.segments if s.source == "env"]
    assert mask.count(0) == sum(len(s.token_ids) for s in env_segs)
    assert mask.count(1) == sum(len(s.token_ids) for s in model_segs)
    model_ids = [t for t, m in zip(ids, mask, strict=True) if m]
    assert tokenizer.decode(model_ids) == "".join(s.text for s in model_segs)
    env_ids = [t for t, m in zip(ids, mask, strict=True) if not m]
    assert env_ids == [t for s in env_segs for t in s.token_ids]
    for s in env_segs:
        assert s.token_ids == tokenizer(s.text, add_special_tokens=False)["input_ids"]
    for s in model_segs:
        assert s.text == tokenizer.decode(s.token_ids)
    assert rollout.response_text == "".join(s.text for s in rollout.segments)


def sources(rollout: Rollout) -> list[str]:
    return [s.source for s in rollout.segments]


# ---------------------------------------------------------------- scripted


def test_search_then_answer(tokenizer, index):
    search = RecordingSearch(index)
    turns = ["<think>x</think><search> moss lamp Serrick </search>", "<answer> Ida </answer>"]
    cfg = RolloutConfig(top_k_passages=3)
    [r] = run_scripted(tokenizer, {"Who made the moss lamp?": turns}, search, cfg)
    assert r.stop_reason == "answer"
    assert r.num_tool_calls == 1
    assert sources(r) == ["model", "env", "model"]
    assert [r.segments[0].text, r.segments[2].text] == turns
    assert search.calls == [["moss lamp Serrick"]]
    info = r.segments[1].text
    assert info == search.expected("moss lamp Serrick", 3)
    assert info.startswith("\n\n<information>Doc 1(Title: Moss lamp)") and info.endswith(INFO_END)
    assert info.count("Doc ") == 3  # 4 passages match; top_k_passages = 3 are shown
    assert len(search.index.search(["moss lamp Serrick"], 5)[0]) == 4
    check_mask(r, tokenizer)
    assert r.response_mask.count(0) == len(tokenizer(info, add_special_tokens=False)["input_ids"])
    assert tags.final_answer(r.response_text) == "Ida"
    assert tags.response_stats(r.response_text).search_calls == 1


def test_without_tag_stops_a_turn_runs_to_its_budget(tokenizer, index):
    """The benchmark's fixed lengths: closing tags end nothing, no search runs."""
    turns = ["<think>x</think><search> moss lamp Serrick </search><answer> Ida </answer>"]
    ids = tuple(prompt_ids(tokenizer, "Who made the moss lamp?"))
    search = RecordingSearch(index)
    cfg = RolloutConfig(max_turns=0, max_turn_tokens=40, max_response_tokens=40)
    [r] = generate_rollouts(ScriptedLM(tokenizer, {ids: turns}), tokenizer, [list(ids)], search,
                            cfg, eos_token_id=-1, tag_stops=False)
    assert r.stop_reason == "length" and len(r.response_ids) == 40
    assert sources(r) == ["model"] and search.calls == []
    assert r.response_text.startswith(turns[0])


def test_information_block_truncated_to_max_obs_tokens(tokenizer, index):
    search = RecordingSearch(index)
    turns = ["<search> moss lamp island salt </search>", "<answer> Serrick </answer>"]
    full = search.expected("moss lamp island salt", 3)
    full_len = len(tokenizer(full, add_special_tokens=False)["input_ids"])
    limit = 40
    assert full_len > limit + 10
    cfg = RolloutConfig(max_obs_tokens=limit)
    [r] = run_scripted(tokenizer, {"Where is Ida from?": turns}, search, cfg)
    assert sources(r) == ["model", "env", "model"] and r.stop_reason == "answer"
    env = r.segments[1]
    assert limit - 5 <= len(env.token_ids) <= limit
    assert env.text.endswith("</information>\n\n")
    assert env.text.startswith("\n\n<information>Doc 1(Title: ")
    body = env.text[: -len("</information>\n\n")]
    assert full.startswith(body) and len(body) < len(full) - 20  # the passages' text was cut
    check_mask(r, tokenizer)
    parsed = [s for s in tags.parse(r.response_text) if s.kind == "information"]
    assert len(parsed) == 1 and parsed[0].closed


def test_corrective_message_after_a_turn_without_call_or_answer(tokenizer, index):
    search = RecordingSearch(index)
    scripts = {
        # EOS ends the turn: corrective message, then the model answers.
        "Question one?": ["<think> I am not sure </think> maybe Ida" + EOS, "<answer> Ida </answer>"],
        # The turn budget ends it (the model rambles): corrective message, then an answer.
        "Question two?": ["<think> hmm" + " hmm" * 40, "<answer> Serrick </answer>"],
    }
    cfg = RolloutConfig(max_turn_tokens=40)
    r1, r2 = run_scripted(tokenizer, scripts, search, cfg)
    for r in (r1, r2):
        assert sources(r) == ["model", "env", "model"]
        assert r.segments[1].text == tags.CORRECTIVE_MESSAGE
        assert r.stop_reason == "answer" and r.num_tool_calls == 0
        check_mask(r, tokenizer)
        assert r.response_mask.count(0) == len(
            tokenizer(tags.CORRECTIVE_MESSAGE, add_special_tokens=False)["input_ids"]
        )
        assert tags.response_stats(r.response_text).invalid_turns == 1
    assert r1.segments[0].token_ids[-1] == tokenizer.eos_token_id  # the sampled EOS is kept
    assert len(r2.segments[0].token_ids) == 40
    assert search.calls == []


def test_max_turns_last_search_not_executed(tokenizer, index):
    search = RecordingSearch(index)
    turns = [f"<search> query {i} moss </search>" for i in range(5)]
    cfg = RolloutConfig(max_turns=2)
    [r] = run_scripted(tokenizer, {"Keep searching?": turns}, search, cfg)
    assert r.num_tool_calls == 2
    assert r.stop_reason == "max_turns"
    assert sources(r) == ["model", "env", "model", "env", "model"]
    assert r.segments[-1].text == turns[2]  # the third call was written, not run
    assert search.calls == [["query 0 moss"], ["query 1 moss"]]
    check_mask(r, tokenizer)


def test_corrective_messages_count_as_turns(tokenizer, index):
    search = RecordingSearch(index)
    cfg = RolloutConfig(max_turns=2, max_turn_tokens=6)
    [r] = run_scripted(tokenizer, {"Ramble?": ["x" + EOS, "y" + EOS, "z" + EOS]}, search, cfg)
    assert sources(r) == ["model", "env", "model", "env", "model"]
    assert r.stop_reason == "eos"  # the last allowed turn ended with EOS
    cfg = RolloutConfig(max_turns=1, max_turn_tokens=6)
    [r] = run_scripted(tokenizer, {"Ramble?": ["<think> a b c d e f g h"]}, search, cfg)
    assert sources(r) == ["model", "env", "model"] and r.stop_reason == "length"
    cfg = RolloutConfig(max_turns=0)
    [r] = run_scripted(tokenizer, {"Search?": ["<search> moss </search>"]}, search, cfg)
    assert sources(r) == ["model"] and r.stop_reason == "max_turns" and search.calls == []


def test_max_response_tokens(tokenizer, index):
    search = RecordingSearch(index)
    scripts = {
        "Ramble forever?": [],  # filler only: every turn hits the turn budget
        "Search forever?": [f"<search> moss lamp {i} </search>" for i in range(20)],
    }
    cfg = RolloutConfig(max_turns=20, max_turn_tokens=30, max_response_tokens=150,
                        max_obs_tokens=60)
    rollouts = run_scripted(tokenizer, scripts, search, cfg)
    for r in rollouts:
        assert r.stop_reason == "length"
        assert len(r.response_ids) <= 150
        check_mask(r, tokenizer)
        assert r.segments[-1].source == "model"
    assert rollouts[0].num_tool_calls == 0 and rollouts[1].num_tool_calls >= 1
    # An answer fits the budget exactly when it must.
    cfg = RolloutConfig(max_response_tokens=5)
    [r] = run_scripted(tokenizer, {"Short?": ["<think> a b c d e f g"]}, search, cfg)
    assert len(r.response_ids) == 5 and r.stop_reason == "length" and sources(r) == ["model"]


def test_mixed_batch_keeps_input_order_and_batches_searches(tokenizer, index):
    search = RecordingSearch(index)
    scripts = {
        "Answer now?": ["<answer> now </answer>"],
        "One search?": ["<search> moss lamp </search>", "<answer> Ida </answer>"],
        "Two searches?": ["<think>a</think><search> Ida Varn </search>",
                          "<search> Serrick island </search>", "<answer> Serrick </answer>"],
        "Ramble then search?": ["<think> long thoughts" * 10, "<search> grey salt </search>",
                                "<answer> salt </answer>"],
        "Stop early?": ["done" + EOS, "<answer> done </answer>"],
    }
    order = ["Two searches?", "Answer now?", "Ramble then search?", "Stop early?", "One search?",
             "Answer now?", "Two searches?"]
    cfg = RolloutConfig(max_turns=4, max_turn_tokens=40)
    rollouts = run_scripted(tokenizer, scripts, search, cfg, prompts=order)
    assert len(rollouts) == len(order)
    expect = {
        "Answer now?": (["model"], 0, "now"),
        "One search?": (["model", "env", "model"], 1, "Ida"),
        "Two searches?": (["model", "env", "model", "env", "model"], 2, "Serrick"),
        "Ramble then search?": (["model", "env", "model", "env", "model"], 1, "salt"),
        "Stop early?": (["model", "env", "model"], 0, "done"),
    }
    for text, r in zip(order, rollouts, strict=True):
        assert r.prompt_ids == prompt_ids(tokenizer, text)
        segs, calls, answer = expect[text]
        assert (sources(r), r.num_tool_calls, r.stop_reason) == (segs, calls, "answer"), text
        assert tags.final_answer(r.response_text) == answer
        check_mask(r, tokenizer)
    # One search call per round with every query of that round, in input order.
    assert search.calls == [
        ["Ida Varn", "moss lamp", "Ida Varn"],
        ["Serrick island", "grey salt", "Serrick island"],
    ]
    ramble = rollouts[2]
    assert ramble.segments[1].text == tags.CORRECTIVE_MESSAGE
    assert ramble.segments[3].text == search.expected("grey salt", 3)


def test_search_without_a_query_gets_the_corrective_message(tokenizer, index):
    search = RecordingSearch(index)
    scripts = {"Broken call?": ["no opening tag </search>", "<answer> ok </answer>"]}
    [r] = run_scripted(tokenizer, scripts, search, RolloutConfig())
    assert sources(r) == ["model", "env", "model"]
    assert r.segments[1].text == tags.CORRECTIVE_MESSAGE
    assert search.calls == [] and r.num_tool_calls == 0


def test_stop_string_inside_a_token_keeps_the_token_whole(tokenizer, index):
    # The tiny tokenizer has a token ">." : "</answer>." ends the stop string inside it.
    ids = tokenizer("</answer>.", add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids[-1:]) == ">."
    search = RecordingSearch(index)
    [r] = run_scripted(tokenizer, {"Q?": ["<answer> a </answer>. more words"]}, search,
                       RolloutConfig())
    assert r.segments[0].text == "<answer> a </answer>."
    assert r.segments[0].token_ids[-1] == ids[-1]
    assert r.stop_reason == "answer"


def test_search_function_result_count_is_checked(tokenizer):
    cfg = RolloutConfig()
    with pytest.raises(ValueError, match="result lists"):
        run_scripted(tokenizer, {"Q?": ["<search> a </search>"]}, lambda qs: [], cfg)


def test_a_registered_tool_runs_beside_search(tokenizer, index):
    """Adding a tool is one registered class: the batched loop stops at its call tag, runs each
    round's calls of it in one batch, and masks its observation, as it does for search."""
    search, reverse = RecordingSearch(index), ReverseTool()
    tools = [SearchTool(search, 3), reverse]
    scripts = {"Reverse it?": ["<reverse> lamp </reverse>", "<answer> pmal </answer>"],
               "Both tools?": ["<reverse> moss </reverse>", "<search> Ida Varn </search>",
                               "<answer> Serrick </answer>"],
               "Search only?": ["<search> grey salt </search>", "<answer> salt </answer>"]}
    rollouts = run_scripted(tokenizer, scripts, tools, RolloutConfig(max_turns=4))
    assert [r.stop_reason for r in rollouts] == ["answer"] * 3
    assert [r.num_tool_calls for r in rollouts] == [1, 2, 1]
    assert reverse.calls == [["lamp", "moss"]]  # round 1, in input order
    assert search.calls == [["grey salt"], ["Ida Varn"]]  # round 1, then round 2
    first, both, _ = rollouts
    assert first.segments[1].text == "\n\n<reversed>pmal</reversed>\n\n"
    assert both.segments[1].text == "\n\n<reversed>ssom</reversed>\n\n"
    assert both.segments[3].text == search.expected("Ida Varn", 3)
    for r in rollouts:
        check_mask(r, tokenizer)


def test_the_python_tool_runs_code_in_the_sandbox_and_masks_its_output(tokenizer, index):
    """A `<code>` call runs in the studio's sandbox (the round's programs in one batch); its
    printed output comes back in `<output>`, masked from the loss; a failed run is marked."""
    python = PythonTool(Sandbox().run_batch)
    scripts = {"What is 6 times 7?": ["<think>multiply</think><code>print(6*7)</code>",
                                      "<answer> 42 </answer>"],
               "What is 1 over 0?": ["<code>print(1/0)</code>", "<answer> none </answer>"]}
    product, broken = run_scripted(tokenizer, scripts, [python, SearchTool(RecordingSearch(index), 3)],
                                   RolloutConfig(max_turns=2))
    assert sources(product) == ["model", "env", "model"] and product.stop_reason == "answer"
    output = product.segments[1]
    assert output.text == "\n\n<output>42</output>\n\n"
    assert (output.tool, output.failed) == ("python", False)
    check_mask(product, tokenizer)
    start = len(product.segments[0].token_ids)
    assert product.response_mask[start:start + len(output.token_ids)] == [0] * len(output.token_ids)
    assert set(product.response_mask) == {0, 1}
    failed = broken.segments[1]
    assert failed.text == ("\n\n<output>ZeroDivisionError: division by zero</output>\n\n")
    assert (failed.tool, failed.failed) == ("python", True)
    assert tool_counts(product) == ({"python": 1}, 0) and tool_counts(broken) == ({"python": 1}, 1)
    stored = rollout_segments(product, "", (tags.PYTHON_TOOL, tags.SEARCH_TOOL))
    assert [[p["kind"] for p in seg["parts"]] for seg in stored] == [
        ["think", "code"], ["output"], ["answer"]]


def test_config_is_validated():
    with pytest.raises(ValueError):
        RolloutConfig(max_turn_tokens=0)
    with pytest.raises(ValueError):
        RolloutConfig(top_p=0)
    with pytest.raises(ValueError):
        RolloutConfig(temperature=-1)
    with pytest.raises(ValueError):
        RolloutConfig(max_turns=-1)
    with pytest.raises(TypeError):
        generate_rollouts(None, None, [[1]], lambda q: [], {"max_turns": 1})


def test_segment_and_rollout_properties():
    r = Rollout([1, 2], [Segment("model", [5, 6], "ab"), Segment("env", [7], "c"),
                         Segment("model", [8], "d")], "answer", 1)
    assert r.response_ids == [5, 6, 7, 8]
    assert r.response_mask == [1, 1, 0, 1]
    assert r.response_text == "abcd"


# ---------------------------------------------------------------- tiny real model


def tiny_prompts(tokenizer) -> list[list[int]]:
    shared = ("<|im_start|>system\nYou are a helpful assistant. Answer the question. "
              "You can search for facts.<|im_end|>\n")
    questions = ["who wrote the novel about the white whale?", "what is the capital of France?",
                 "Which river flows through the city?", "when did the first person walk on the moon?"]
    texts = [f"{shared}<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n" for q in questions]
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    return [ids[0], ids[1], ids[0], ids[2], ids[3], ids[1]]  # repeats, like G samples


def assert_greedy_consistent(model, rollouts: list[Rollout]) -> None:
    """Every model token is the argmax of a plain (unpadded, uncached) forward."""
    for r in rollouts:
        full = torch.tensor([r.prompt_ids + r.response_ids])
        with torch.inference_mode():
            logits = model(full).logits[0]
        start = len(r.prompt_ids)
        for i, (t, m) in enumerate(zip(r.response_ids, r.response_mask, strict=True)):
            if m:
                assert logits[start + i - 1].argmax().item() == t, (i, r.segments)


def test_greedy_tokens_match_full_context_forward(scrambled, index, monkeypatch):
    model, tokenizer = scrambled
    prompts = tiny_prompts(tokenizer)
    cfg = RolloutConfig(max_turns=3, max_turn_tokens=10, max_response_tokens=400, temperature=0)
    search = RecordingSearch(index)
    # First run: find a token the model emits often, and make it the EOS so that rows
    # end their turns at different steps (parking, swapping and compacting rows).
    first = generate_rollouts(model, tokenizer, prompts, search, cfg, eos_token_id=0)
    counts: dict[int, int] = {}
    for r in first:
        for seg in r.segments:
            for t in seg.token_ids[1:] if seg.source == "model" else []:
                counts[t] = counts.get(t, 0) + 1
    eos = max(counts, key=counts.get)
    rollouts = generate_rollouts(model, tokenizer, prompts, search, cfg, eos_token_id=eos)
    lengths = {len(s.token_ids) for r in rollouts for s in r.segments if s.source == "model"}
    assert len(lengths) > 2  # turns of different lengths
    assert_greedy_consistent(model, rollouts)
    for r in rollouts:
        check_mask(r, tokenizer)
        assert len(r.response_ids) <= 400
    # Re-encoding the whole context every turn, unshared prompts (each row its own copy)
    # and the model's own attention function give the same tokens.
    for switches in (
        {"reuse_cache": False, "share_prompts": False, "grouped_attention": False},
        {"share_prompts": False},
        {"grouped_attention": False},  # the shared prefix copied into every row
        {"shared_kv": False},
        {"prefill_tokens": 7},  # prefill in chunks of a few tokens, rows joining late
    ):
        with monkeypatch.context() as patch:
            if "prefill_tokens" in switches:
                patch.setitem(rollout_module._PREFILL_TOKENS, "cpu", switches.pop("prefill_tokens"))
            other = generate_rollouts(model, tokenizer, prompts, search, cfg, eos_token_id=eos,
                                      **switches)
        assert [r.response_ids for r in other] == [r.response_ids for r in rollouts], switches
        assert [r.stop_reason for r in other] == [r.stop_reason for r in rollouts], switches
    assert model.config._attn_implementation == "sdpa"  # switched back


def test_model_in_training_mode_is_rolled_out_in_eval_mode_and_restored(tiny, index):
    model, tokenizer = tiny
    prompts = tiny_prompts(tokenizer)[:2]
    cfg = RolloutConfig(max_turns=1, max_turn_tokens=6, temperature=0)
    expected = generate_rollouts(model, tokenizer, prompts, RecordingSearch(index), cfg)
    model.gradient_checkpointing_enable()
    model.train()
    try:
        got = generate_rollouts(model, tokenizer, prompts, RecordingSearch(index), cfg)
        assert model.training
    finally:
        model.gradient_checkpointing_disable()
        model.eval()
    assert [r.response_ids for r in got] == [r.response_ids for r in expected]


@pytest.mark.parametrize("q", [1, 5])
def test_shared_prefix_attention_matches_plain_attention(q):
    """Attention over [prefix] + [row cache with holes] equals SDPA over the concatenation."""
    gen = torch.Generator().manual_seed(0)
    b, hkv, g, d, p, lr = 3, 2, 3, 8, 6, 9
    query = torch.randn(b, hkv * g, q, d, generator=gen)
    key, value = torch.randn(b, hkv, lr, d, generator=gen), torch.randn(b, hkv, lr, d, generator=gen)
    pk, pv = torch.randn(1, hkv, p, d, generator=gen), torch.randn(1, hkv, p, d, generator=gen)
    valid = torch.rand(b, lr, generator=gen) > 0.3
    valid[:, -q:] = True
    valid[0, : lr - q] = False  # a row that sees only the prefix and its own new tokens
    causal = torch.ones(q, lr, dtype=torch.bool).tril(lr - q)
    mask = (valid[:, None, None, :] & causal)  # [b, 1, q, lr]
    full_k = torch.cat([pk.expand(b, -1, -1, -1), key], 2).repeat_interleave(g, 1)
    full_v = torch.cat([pv.expand(b, -1, -1, -1), value], 2).repeat_interleave(g, 1)
    full_mask = torch.cat([torch.ones(b, 1, q, p, dtype=torch.bool), mask], 3)
    expected = torch.nn.functional.scaled_dot_product_attention(
        query, full_k, full_v, attn_mask=full_mask).transpose(1, 2)
    got = attention.attend_with_shared_prefix(query, key, value, mask, pk, pv, None)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    # The kernel-free version (other devices) agrees, including queries that see nothing.
    folded = query.reshape(b, hkv, g * q, d)
    m = mask[:, :, None].expand(b, 1, g, q, lr).reshape(b, 1, g * q, lr).clone()
    m[1] = False
    o_cpu, lse_cpu = attention._cpu_attention(folded, key, value, m, d**-0.5)
    o_mm, lse_mm = attention._plain_attention(folded, key, value, m, d**-0.5)
    torch.testing.assert_close(o_mm, o_cpu, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse_mm, lse_cpu)
    assert torch.isinf(lse_cpu[1]).all() and (o_cpu[1] == 0).all()


def test_a_row_reads_only_its_part_of_the_shared_prefix():
    """A row whose prompt leaves the shared prefix after its first tokens (`prefix_reads`)
    gets attention over those tokens and its own cache, nothing of the rest."""
    gen = torch.Generator().manual_seed(1)
    b, hkv, g, d, p, lr = 3, 2, 3, 8, 7, 5
    for q in (1, 4):
        query = torch.randn(b, hkv * g, q, d, generator=gen)
        key, value = (torch.randn(b, hkv, lr, d, generator=gen) for _ in range(2))
        pk, pv = (torch.randn(1, hkv, p, d, generator=gen) for _ in range(2))
        mask = torch.ones(q, lr, dtype=torch.bool).tril(lr - q)[None, None].expand(b, 1, q, lr)
        reads = torch.arange(p)[None, :] < torch.tensor([p, 3, 0])[:, None]
        got = attention.attend_with_shared_prefix(query, key, value, mask, pk, pv, None, reads)
        for r in range(b):
            seen = int(reads[r].sum())
            k = torch.cat([pk[0, :, :seen], key[r]], 1).repeat_interleave(g, 0)
            v = torch.cat([pv[0, :, :seen], value[r]], 1).repeat_interleave(g, 0)
            m = torch.cat([torch.ones(1, q, seen, dtype=torch.bool), mask[r]], 2)
            expected = torch.nn.functional.scaled_dot_product_attention(
                query[r], k, v, attn_mask=m).transpose(0, 1)
            torch.testing.assert_close(got[r], expected, rtol=1e-5, atol=1e-5)


def test_shared_block_is_the_start_most_prompts_share_after_the_common_prefix():
    block = list(range(100, 140))
    rests = [block + [1, 2], [5, 6, 7], block + [3], [8] * 30, block + [4, 4], [8] * 30 + [9]]
    assert rollout_module._shared_block(rests) == ([0, 2, 4], 40)
    assert rollout_module._shared_block([[1, 2], [3, 4]]) == ([], 0)
    # a member keeps a token of its own: the block stops one short of the shortest
    assert rollout_module._shared_block([block, block + [7]]) == ([0, 1], 39)


def test_a_mixed_steps_exemplar_block_is_prefilled_once_and_read_from_one_copy(
        scrambled, index, monkeypatch):
    """Hinted prompts (instruction, exemplar turns, question) beside plain ones (instruction,
    question): the exemplars go into the shared prefix once, the plain rows read only its
    instruction, and every token is what a plain full-context forward gives."""
    model, tokenizer = scrambled
    plain = tiny_prompts(tokenizer)
    system = common_prefix_length(plain)
    exemplars = tokenizer("<|im_start|>user\nwhat is the capital of France?<|im_end|>\n"
                          "<|im_start|>assistant\n<answer>Paris</answer><|im_end|>\n",
                          add_special_tokens=False)["input_ids"]
    hinted = [p[:system] + exemplars + p[system:] for p in plain[:4]]
    prompts = [hinted[0], hinted[0], plain[0], plain[0], hinted[1], hinted[1], plain[1],
               plain[1], hinted[3], plain[3]]
    cfg = RolloutConfig(max_turns=1, max_turn_tokens=8, max_response_tokens=40, temperature=0)
    shared: list[tuple[int, list[int]]] = []
    share_prefix = rollout_module.RolloutCache.share_prefix

    def recording(cache, rows, cap, reads=None):
        shared.append((cache.length, list(reads)))
        share_prefix(cache, rows, cap, reads)

    monkeypatch.setattr(rollout_module.RolloutCache, "share_prefix", recording)
    rollouts = generate_rollouts(model, tokenizer, prompts, RecordingSearch(index), cfg)
    [(length, reads)] = shared
    assert length == system + len(exemplars) and sorted(reads) == [system] * 3 + [length] * 3
    assert_greedy_consistent(model, rollouts)
    other = generate_rollouts(model, tokenizer, prompts, RecordingSearch(index), cfg,
                              share_prompts=False)
    assert [r.response_ids for r in other] == [r.response_ids for r in rollouts]


def test_same_generator_seed_same_rollouts(scrambled, index):
    model, tokenizer = scrambled
    prompts = tiny_prompts(tokenizer)
    cfg = RolloutConfig(max_turns=2, max_turn_tokens=16, max_response_tokens=300)

    def run(seed):
        g = torch.Generator().manual_seed(seed)
        return generate_rollouts(model, tokenizer, prompts, RecordingSearch(index), cfg,
                                 generator=g)

    a, b, c = run(7), run(7), run(8)
    assert [r.response_ids for r in a] == [r.response_ids for r in b]
    assert [r.segments for r in a] == [r.segments for r in b]
    assert [r.response_ids for r in a] != [r.response_ids for r in c]
    # The G samples of one prompt differ from each other.
    assert a[0].response_ids != a[2].response_ids
    for r in a:
        check_mask(r, tokenizer)


def test_tiny_top_p_keeps_only_the_most_likely_token(scrambled, index):
    model, tokenizer = scrambled
    prompts = tiny_prompts(tokenizer)[:3]
    greedy = generate_rollouts(model, tokenizer, prompts, RecordingSearch(index),
                               RolloutConfig(max_turns=1, max_turn_tokens=12, temperature=0))
    nucleus = generate_rollouts(model, tokenizer, prompts, RecordingSearch(index),
                                RolloutConfig(max_turns=1, max_turn_tokens=12, top_p=1e-6),
                                generator=torch.Generator().manual_seed(3))
    assert [r.response_ids for r in nucleus] == [r.response_ids for r in greedy]


# ---------------------------------------------------------------- the real default model


@pytest.fixture(scope="module")
def smollm(models_dir):
    """The bundled SmolLM2 from the run's one conversion (tests/conftest.py `models_dir`)."""
    from studio.models.base_models import DEFAULT_MODEL, load_causal_lm, load_tokenizer

    return load_causal_lm(DEFAULT_MODEL, models_dir), load_tokenizer(DEFAULT_MODEL, models_dir)


@pytest.mark.slow
@pytest.mark.skipif(not HOTPOT_TRAIN.is_dir(), reason=f"{HOTPOT_TRAIN} is not there")
def test_smollm2_searches_the_corpus(smollm):
    from studio.method.exemplars import parse_jsonl
    from studio.method.prompt import build_prompt

    model, tokenizer = smollm
    rows = [json.loads(line) for line in (HOTPOT_TRAIN / "corpus.jsonl").read_text().splitlines() if line]
    titles = {r["title"] for r in rows}
    corpus = build_index([Passage(str(r["id"]), r["title"], r["text"]) for r in rows])
    exemplars = parse_jsonl(demo.EXEMPLARS.read_text())
    prompts = []
    for line in (HOTPOT_TRAIN / "qa.jsonl").read_text().splitlines()[:4]:
        prompt = build_prompt(json.loads(line)["question"], exemplars, 3, layout="chat",
                              assistant_prefix="<think>")
        prompts += [prompt.token_ids(tokenizer)] * 2
    calls: list[list[str]] = []

    def search(queries):
        calls.append(list(queries))
        return [[(h.passage.title, h.passage.text) for h in hits]
                for hits in corpus.search(queries, 3)]

    cfg = RolloutConfig(max_turns=1, max_turn_tokens=96, max_response_tokens=600,
                        temperature=1.0)
    # 4 questions x 2 samples, as method.md measured (about half of them search with 3
    # exemplars): one question's samples alone can all miss (they did once the exemplars'
    # text changed)
    rollouts = generate_rollouts(model, tokenizer, prompts, search, cfg,
                                 generator=torch.Generator().manual_seed(0))
    assert [r.prompt_ids for r in rollouts] == prompts
    searched = [r for r in rollouts if r.num_tool_calls > 0]
    assert searched, [r.response_text for r in rollouts]
    for r in rollouts:
        check_mask(r, tokenizer)
        assert r.stop_reason in ("answer", "eos", "length", "max_turns")
    r = searched[0]
    blocks = [s for s in r.segments if s.source == "env" and s.text != tags.CORRECTIVE_MESSAGE]
    assert len(blocks) == r.num_tool_calls
    block = blocks[0].text
    assert block.startswith("\n\n<information>Doc 1(Title: ") and block.endswith(INFO_END)
    for i in range(1, block.count("\nDoc ") + 2):  # every passage shown is from the corpus
        assert any(f"Doc {i}(Title: {t}) " in block for t in titles), (i, block)
    query = tags.search_queries(r.segments[r.segments.index(blocks[0]) - 1].text)[-1]
    top = corpus.search([query], 3)[0]
    assert block.startswith(f"\n\n<information>Doc 1(Title: {top[0].passage.title}) ")
    env_tokens = sum(len(s.token_ids) for s in r.segments if s.source == "env")
    assert r.response_mask.count(0) == env_tokens
    assert sum(len(c) for c in calls) == sum(x.num_tool_calls for x in rollouts)
