"""Prompt sets (MT-Bench, HumanEval, Spec-Bench, jsonl, HF datasets, built-in) and their encoding
with the target's chat template. See `specbench.data.prompts` for the contract."""

from specbench.data.base import Prompt, encode_prompt
from specbench.data.prompts import check_prompt_lengths, load_prompts

__all__ = ["Prompt", "check_prompt_lengths", "encode_prompt", "load_prompts"]
