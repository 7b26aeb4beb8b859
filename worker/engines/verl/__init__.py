"""The veRL backend: the same run config trained by veRL (GRPO, vLLM rollouts) on Ray.

The studio writes the inputs (`dataset`, `reward`, `config`), veRL's
`main_ppo` trains with the studio's own agent loop (`agent_loop`), and the
launcher (`launcher`) tails veRL's file logger and rollout dumps into the
studio's tables (`ingest`) and merges the checkpoint into a Hugging Face
folder (`export`). Only `agent_loop` and the functions that compose veRL's
config import veRL; nothing here is imported by the web app.
"""
