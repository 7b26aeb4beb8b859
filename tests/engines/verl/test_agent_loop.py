"""The studio's agent loop driven the way veRL drives it: built from the registry file the
launcher writes, `run(sampling_params, **row)` on an RLHFDataset row, a tiny transformers
model behind the rollout server's `generate` call shape, the studio's real /retrieve."""

from __future__ import annotations

import asyncio

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from studio.method.protocol import fit_observation
from studio.method.tags import corrective_message
from studio.method.tools import SearchTool
from studio.services import corpora
from studio.services.reproduce import run_bundle
from tests.support.tiny_server import TinyGenerationServer
from worker.engines.verl.config import compose
from worker.engines.verl.launcher import VerlLaunch

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0,
            "logprobs": True}  # what veRL's agent loop worker passes


@pytest.fixture
def prepared(verl, verl_run, studio_api):
    """A run prepared by the launcher itself: data set, agent spec, registry file, token."""
    base_url = studio_api
    settings, run, files, model = verl_run(verl={"studio_url": base_url},
                                           grpo={"max_response_tokens": 400})
    launch = VerlLaunch(settings, run["id"])
    cfg = compose(launch.prepare())
    return launch, cfg, model


def make_loop(cfg, server, tokenizer):
    """As veRL's AgentLoopWorker does: registry entries from the YAML, hydra.utils.instantiate."""
    import hydra
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    [entry] = OmegaConf.load(cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path)
    assert entry.name == cfg.actor_rollout_ref.rollout.agent.default_agent_loop
    return hydra.utils.instantiate(
        config=entry, trainer_config=DictConfigWrap(config=cfg), server_manager=server,
        tokenizer=tokenizer, processor=None, hf_model_type=None, dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(cfg.data), tools=ToolListWrap([]))


def rollout(cfg, model, tokenizer, row, global_steps, scripted):
    """One `run` through AgentLoopBase's interface; the output and the server's record."""
    from verl.experimental.agent_loop import AgentLoopBase

    server = TinyGenerationServer(model, tokenizer, scripted_turns=scripted, seed=global_steps)

    async def drive():
        loop = make_loop(cfg, server, tokenizer)
        assert isinstance(loop, AgentLoopBase)
        kwargs = {**row, "global_steps": global_steps, "uid": "u0", "session_id": 0}
        return await loop.run(dict(SAMPLING), **kwargs)

    return asyncio.run(drive()), server


def spans(output):
    """The response as (mask value, token ids) runs."""
    out = []
    for token, m in zip(output.response_ids, output.response_mask, strict=True):
        if out and out[-1][0] == m:
            out[-1][1].append(token)
        else:
            out.append((m, [token]))
    return out


def test_ids_mask_and_logprobs_line_up_and_model_tokens_are_the_models(prepared):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    launch, cfg, model_dir = prepared
    settings, files, config = launch.settings, launch.files, launch.config
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    row = RLHFDataset(data_files=[str(files.train_data)], tokenizer=tokenizer, config=cfg.data)[3]
    question = "Which town holds the Herring Moon Fair?"
    assert row["reward_model"]["ground_truth"]["question"] == question

    out, server = rollout(cfg, model, tokenizer, row, 1,
                          [" look it up </think><search> Herring Moon Fair </search>"])

    n = len(out.response_ids)
    assert n == len(out.response_mask) == len(out.response_logprobs) > 0
    assert n <= config.grpo.max_response_tokens == cfg.actor_rollout_ref.rollout.response_length
    assert out.extra_fields["response_tokens"] == n  # the overlong penalty's length
    # every token with mask 1 is a token the model generated, in order, with its log-prob
    model_ids = [t for c in server.calls for t in c.token_ids]
    model_lp = [p for c in server.calls for p in c.log_probs]
    assert [t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m] == model_ids
    assert [p for p, m in zip(out.response_logprobs, out.response_mask, strict=True) if m] \
        == model_lp
    assert all(p == 0.0 for p, m in zip(out.response_logprobs, out.response_mask, strict=True)
               if not m)
    # one model span per generate call, each continuing from the prompt and all before it
    starts, position = [], 0
    for m, ts in spans(out):
        if m:
            starts.append(position)
        position += len(ts)
    assert len(starts) == len(server.calls) == 3  # search, an invalid turn, the last turn
    for start, call in zip(starts, server.calls, strict=True):
        assert call.prompt_ids == out.prompt_ids + out.response_ids[:start]
        assert out.response_ids[start:start + len(call.token_ids)] == call.token_ids

    # the environment's spans: the passages /retrieve returned, then the correction
    corpus_id = corpora.find_corpus(settings, "demo")["id"]
    hits = corpora.search(settings, corpus_id, "Herring Moon Fair", 3)["hits"]
    search = SearchTool(lambda queries: [], config.grpo.top_k)
    expected_block = fit_observation(tokenizer, search, [(h["title"], h["text"]) for h in hits],
                                     len(spans(out)[0][1]), config.grpo.limits())
    env_spans = [tokenizer.decode(ts) for m, ts in spans(out) if not m]
    assert env_spans[0] == expected_block[0]
    assert env_spans[1] == corrective_message()
    assert [m for m, _ in spans(out)][:3] == [1, 0, 1]

    # the prompt: the native engine's, with the stage's one exemplar at global step 1
    prompt = config.build_prompt(question, launch.plan.exemplar_list(), 1)
    text = tokenizer.apply_chat_template(prompt.messages, tokenize=False,
                                         add_generation_prompt=True) + prompt.assistant_prefix
    assert out.prompt_ids == tokenizer(text, add_special_tokens=False)["input_ids"]

    # the run's bundle, written by the launcher: veRL's seeds as it set them
    bundle = run_bundle(settings, launch.run_id)
    assert bundle["config"] == config.model_dump(mode="json")
    assert bundle["determinism"] == {"engine": "verl", "seed_overrides": [
        f"data.seed={config.seed}", f"actor_rollout_ref.actor.data_loader_seed={config.seed}",
        f"actor_rollout_ref.rollout.seed={config.seed}"]}


@pytest.mark.parametrize(("split", "global_steps", "exemplars"), [
    ("train", 1, 1), ("train", 2, 0), ("train", 4, 0), ("val", 1, 0)])
def test_the_exemplar_count_follows_global_steps(prepared, split, global_steps, exemplars):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    launch, cfg, model_dir = prepared
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    data = launch.files.train_data if split == "train" else launch.files.val_data
    row = RLHFDataset(data_files=[str(data)], tokenizer=tokenizer, config=cfg.data)[0]
    out, _ = rollout(cfg, model, tokenizer, row, global_steps,
                     [" sure </think><answer> 1702 </answer>"])
    shown = launch.plan.exemplar_list()
    prompt = tokenizer.decode(out.prompt_ids)
    assert sum(e.question in prompt for e in shown) == exemplars
    assert out.response_mask == [1] * len(out.response_ids)  # answered at once: no env tokens
    assert tokenizer.decode(out.response_ids).endswith("</answer>")
