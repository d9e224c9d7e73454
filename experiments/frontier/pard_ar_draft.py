"""The shipped PARD drafter (specbench/checkpoints/parallel-smollm2-135m) as an ordinary model directory, so that
`strategy=draft_model draft.path=<dir>` runs the same 2-layer LM autoregressively: K draft forwards per step
instead of parallel's one forward over K-1 mask tokens (PARD's own comparison, arXiv 2504.18583).

    python experiments/frontier/pard_ar_draft.py .cache/pard-ar      # ~150 MB, not committed (.cache/ is ignored)

The directory holds the drafter's 2 trained layers and final norm, the target's embedding and (tied) LM head, and
the target's tokenizer; the weights are the checkpoint's, cast to fp32, bit for bit (checked below).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from specbench.models.loading import load_model, resolve_spec
from specbench.strategies.parallel import load_parallel


def main(out: str) -> None:
    target = load_model(resolve_spec({"name": "smollm2-135m"}, "target"), torch.device("cpu"), torch.float32)
    checkpoint = Path(__file__).resolve().parents[2] / "specbench/checkpoints/parallel-smollm2-135m"
    draft, cfg = load_parallel(checkpoint, target.model, "smollm2-135m")
    draft.config.num_hidden_layers = cfg.num_layers
    draft.save_pretrained(out)
    target.tokenizer.save_pretrained(out)
    from transformers import AutoModelForCausalLM

    back = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    for name, tensor in draft.state_dict().items():
        assert torch.equal(back.state_dict()[name], tensor), name
    print(f"{out}: {cfg.num_layers} layers, {sum(p.numel() for p in back.parameters()) / 1e6:.1f} M parameters "
          f"(embedding and LM head the target's), mask id {cfg.mask_token_id} unused here")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".cache/pard-ar")
