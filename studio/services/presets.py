"""Ready-made runs a new user launches in one click (Launch page) or by name (the CLI).

`quick-start` is the demo world, the 3 -> 2 -> 0 exemplar curriculum and settings
chosen by experiment (bench/icrl_effect.py; the tries and their figures in docs/engine.md,
"The ICRL effect") so that on the embedded default (2 CPU cores, SmolLM2-135M) the run
ends in about half an hour with its zero-shot evaluation, base against trained, on the
demo pack's held-out questions, which training never sees. Rollouts sample at
temperature 0.5, not method.md's 1.0: at 1.0 the small model writes noise after the
first search result. Everything else keeps method.md's defaults (the reward included).
"""

from __future__ import annotations

import copy

from studio.services import demo
from studio.services.access import Actor
from studio.services.errors import InvalidInput
from studio.settings import Settings

QUICK_START = "quick-start"

RUN_PRESETS: dict[str, dict] = {
    QUICK_START: {
        "name": "quick-start",
        "data": {"corpus": demo.DEMO_NAME, "train": demo.DEMO_NAME,
                 "eval": [demo.HELDOUT_NAME], "exemplars": demo.DEMO_NAME},
        "curriculum": {"stages": [{"exemplars": 3, "steps": 6}, {"exemplars": 2, "steps": 6},
                                  {"exemplars": 0, "steps": 8}]},
        "prompt": {"layout": "chat", "assistant_prefix": "<think>"},
        "grpo": {"batch_size": 2, "group_size": 4, "lr": 5.0e-4, "warmup_ratio": 0.1,
                 "temperature": 0.5,
                 "max_turns": 2, "max_turn_tokens": 64, "max_response_tokens": 640,
                 "max_obs_tokens": 200},
        "lora": {"rank": 16, "alpha": 32},
        "engine": {"checkpoint_every": 8, "evaluate_at_end": True},
        "seed": 0,
    },
}

def _steps(name: str) -> int:
    return sum(stage["steps"] for stage in RUN_PRESETS[name]["curriculum"]["stages"])


DESCRIPTIONS = {
    QUICK_START: f"the demo world, 3 -> 2 -> 0 exemplars, {_steps(QUICK_START)} small steps "
                 "with LoRA; ends with base against trained on the demo pack's held-out questions",
}


def preset_config(name: str, settings: Settings) -> dict:
    """Preset `name`'s run config (a dict the run schema takes) for the studio's default model
    (the bundled SmolLM2 unless `STUDIO_DEFAULT_MODEL` names another)."""
    if name not in RUN_PRESETS:
        raise InvalidInput(f"preset: '{name}' is not one of {', '.join(RUN_PRESETS)}")
    return {**copy.deepcopy(RUN_PRESETS[name]), "model": settings.default_model}


def data_ready(settings: Settings) -> bool:
    """Whether the data the presets name (the demo pack) is stored."""
    return demo.demo_pack_stored(settings)


def prepare_preset(settings: Settings, actor: Actor, name: str) -> dict:
    """The preset's config, with the data it names stored (the demo pack, indexed now, the
    actor's where it stores it)."""
    config = preset_config(name, settings)
    demo.load_demo_pack(settings, actor, index_now=True)
    return config
