"""The studio's agent loop driven the way veRL drives it: built from the registry file the
launcher writes, `run(sampling_params, **row)` on an RLHFDataset row, a tiny transformers
model behind the rollout server's `generate` call shape, the studio's real /retrieve."""

from __future__ import annotations

import asyncio

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from studio.method.prompt import derive_seed
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


def prepare(verl_run, base_url, **overrides):
    """A run prepared by the launcher itself: data set, agent spec, registry file, token."""
    grpo = {"max_response_tokens": 400, **overrides.pop("grpo", {})}
    settings, run, files, model = verl_run(verl={"studio_url": base_url}, grpo=grpo,
                                           **overrides)
    launch = VerlLaunch(settings, run["id"])
    cfg = compose(launch.prepare())
    return launch, cfg, model


@pytest.fixture
def prepared(verl, verl_run, studio_api):
    return prepare(verl_run, studio_api)


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


def rollout(cfg, model, tokenizer, row, global_steps, scripted, session=0):
    """One `run` through AgentLoopBase's interface (`session`: the sample's number in its
    group, veRL's session_id); the output and the server's record."""
    from verl.experimental.agent_loop import AgentLoopBase

    server = TinyGenerationServer(model, tokenizer, scripted_turns=scripted, seed=global_steps)

    async def drive():
        loop = make_loop(cfg, server, tokenizer)
        assert isinstance(loop, AgentLoopBase)
        kwargs = {**row, "global_steps": global_steps, "uid": "u0", "session_id": session}
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
    assert out.extra_fields["working_calls"] == 1  # the search (the call bonus's count)
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
    # guidance.mode: shown (the default) adds no guidance fields: the sample trains on what
    # it was sampled with
    assert set(out.extra_fields) == {"turn_scores", "tool_rewards", "response_tokens",
                                     "working_calls"}

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


ANSWER_AT_ONCE = [" sure </think><answer> 1702 </answer>"]


@pytest.mark.parametrize(("global_steps", "sessions_guided"), [(1, [1, 1, 1, 0]),
                                                               (2, [0, 0, 0, 0])])
def test_a_mixed_group_samples_its_guided_answers_with_the_exemplars_and_trains_without(
        verl, verl_run, studio_api, global_steps, sessions_guided):
    """guidance.mode: mixed, share 0.75 of a group of 4: in the stage with an exemplar
    (global step 1), sessions 0-2 are sampled on the prompt with the stage's (sampled)
    exemplar, session 3 on the prompt without, and all four hand veRL the prompt without
    it; in the stage without (step 2) none is guided. Every sample says whether it was
    guided and by which exemplars."""
    from verl.utils.dataset.rl_dataset import RLHFDataset

    launch, cfg, model_dir = prepare(
        verl_run, studio_api, grpo={"group_size": 4}, prompt={"exemplar_selection": "sample"},
        guidance={"mode": "mixed", "share": 0.75})
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    row = RLHFDataset(data_files=[str(launch.files.train_data)], tokenizer=tokenizer,
                      config=cfg.data)[3]
    question, exemplars = row["reward_model"]["ground_truth"]["question"], \
        launch.plan.exemplar_list()
    seed = launch.config.seed
    hinted = launch.config.build_prompt(question, exemplars, 1,
                                        derive_seed(seed, global_steps - 1, row["index"]))
    plain = launch.config.build_prompt(question, exemplars, 0).token_ids(tokenizer)
    assert cfg.actor_rollout_ref.rollout.n == 4 and hinted.token_ids(tokenizer) != plain

    for session, guided in enumerate(sessions_guided):
        out, server = rollout(cfg, model, tokenizer, row, global_steps, ANSWER_AT_ONCE,
                              session)
        [call] = server.calls
        assert out.prompt_ids == plain  # old, reference log-probs and the loss: no exemplar
        assert call.prompt_ids == (hinted.token_ids(tokenizer) if guided else plain)
        assert out.response_ids == call.token_ids  # the hinted response, unchanged
        assert out.extra_fields["guided"] == guided
        assert out.extra_fields["hint_exemplars"] == (list(hinted.exemplar_indices) if guided
                                                      else [])
        if guided:
            [shown] = out.extra_fields["hint_exemplars"]
            assert exemplars[shown].question in tokenizer.decode(call.prompt_ids)
            assert exemplars[shown].question not in tokenizer.decode(out.prompt_ids)
