"""The studio's veRL agent loop: the tag protocol of the run's tools (not veRL's JSON tools).

veRL imports this module in its Ray workers through the registry file the
launcher writes (`actor_rollout_ref.rollout.agent.agent_loop_config_path`,
entries `{name, _target_, spec_path}`), builds one `IcrlSearchAgentLoop` per
sample and awaits `run(sampling_params, **row)`. The row carries the data
set's columns and, in veRL's V1 trainer, `global_steps`, from which the loop
takes the stage's exemplar count, so the whole curriculum runs in one veRL
run. The protocol itself is `protocol.roll_out`; it runs one tool call at a time (the
python tool's program in the studio's sandbox, `worker.tools`), off the event loop.

With `guidance.mode: mixed` (`studio.method.guidance`), every sample hands veRL the prompt
without exemplars as its `prompt_ids`, so veRL takes the old and reference log-probs and
the loss on it; a guided sample (`AgentSpec.guided`) is rolled out on the prompt with the
stage's exemplars (the hint), the others on the prompt they train on, as in the native
engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop import AgentLoopBase, AgentLoopOutput
from verl.utils.profiler import simple_timer

from studio.method import protocol
from studio.method.prompt import Prompt
from studio.method.tools import Tool
from studio.settings import get_settings
from worker.engines.verl.protocol import Retriever, load_agent_spec, roll_out, run_in_thread
from worker.tools import build_tools


class IcrlSearchAgentLoop(AgentLoopBase):
    """One rollout of the tag protocol against veRL's rollout servers and the studio's /retrieve."""

    def __init__(self, *args, spec_path: str, **kwargs):
        kwargs.pop("name", None)  # the registry entry's own key, passed along by hydra
        kwargs.pop("tools", None)
        super().__init__(*args, **kwargs)
        self.spec = load_agent_spec(spec_path)
        self.limits = self.spec.run_config.grpo.limits(self.rollout_config.response_length)
        self.eos_ids = {t for t in (self.tokenizer.eos_token_id,) if t is not None}

    def prompt(self, question: str, k: int, seed: int) -> Prompt:
        """The native engine's prompt: the run's layout, k exemplars, the assistant prefix."""
        return self.spec.run_config.build_prompt(question, self.spec.exemplar_list(), k, seed)

    def prompt_ids(self, prompt: Prompt) -> list[int]:
        return self._cap_text_prompt_length(prompt.token_ids(self.tokenizer))

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        if "global_steps" not in kwargs or "session_id" not in kwargs:
            raise RuntimeError("the studio's agent loop needs veRL's V1 trainer "
                               "(trainer.use_v1=true), which passes global_steps and "
                               "session_id to each sample")
        steps = int(kwargs["global_steps"])
        extra = dict(kwargs.get("extra_info") or {})
        truth = kwargs["reward_model"]["ground_truth"]
        index = int(extra.get("index", 0))
        k = self.spec.exemplars_for(str(extra.get("split", "train")), steps, index)
        seed, question = self.spec.sample_seed(steps, index), truth["question"]
        trained = self.prompt(question, self.spec.trained_exemplars(k), seed)
        guided = self.spec.guided(k, int(kwargs["session_id"]), self.rollout_config.n)
        hint = self.prompt(question, k, seed) if guided else None
        trained_ids = self.prompt_ids(trained)
        sampled_ids = self.prompt_ids(hint) if hint else trained_ids
        token = Path(self.spec.token_file).read_text().strip()
        top_k = self.spec.run_config.grpo.top_k
        tools = build_tools(self.spec.run_config.tools, get_settings(),
                            self.spec.retrieve_url and
                            Retriever(self.spec.retrieve_url, token, top_k), top_k)
        stop = list(protocol.stop_strings(tools))
        request_id = uuid4().hex  # one sticky session per rollout: prefix caching across turns
        metrics: dict[str, float] = {}

        async def generate(context: list[int], max_tokens: int):
            params = {**sampling_params, "stop": stop, "max_tokens": max_tokens}
            with simple_timer("generate_sequences", metrics):
                out = await self.server_manager.generate(
                    request_id=request_id, prompt_ids=context, sampling_params=params)
            return out.token_ids, out.log_probs

        async def execute(tool: Tool, text: str):
            with simple_timer("tool_calls", metrics):
                return await run_in_thread(tool, text)

        result = await roll_out(sampled_ids, generate, tools, self.tokenizer, self.limits,
                                self.eos_ids, execute)
        return AgentLoopOutput(
            prompt_ids=trained_ids,
            response_ids=result.response_ids,
            response_mask=result.response_mask,
            response_logprobs=result.response_logprobs,
            num_turns=1 + result.model_turns + result.env_turns,
            metrics=metrics,
            # veRL's reward loop merges these into the reward function's extra_info: the
            # overlong penalty counts the whole response, the tool's tokens included; the
            # call bonus the calls that worked.
            extra_fields={"turn_scores": [], "tool_rewards": [],
                          "response_tokens": len(result.response_ids),
                          "working_calls": result.working_calls,
                          **self.guidance_fields(hint)},
        )

    def guidance_fields(self, hint: Prompt | None) -> dict[str, Any]:
        """In a mixed-guidance run, every sample's: whether it was sampled with a `hint` and
        which exemplars that showed (their indices in the run's set; none without one), the
        same keys for every sample, as veRL's batches need. None in a `shown` run."""
        if self.spec.run_config.guidance.mode != "mixed":
            return {}
        return {"guided": int(hint is not None),
                "hint_exemplars": list(hint.exemplar_indices) if hint else []}
