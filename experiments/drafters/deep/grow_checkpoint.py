"""A checkpoint of the shipped EAGLE head grown to more decoder layers, untrained: what `specbench.train`'s
strategy.init_from does before its first step (EagleTrainer.load_start: the new layers' o_proj and down_proj zero), so
the grown head drafts exactly as the shipped one and costs one more layer a pass. For the CPU's cost of a deeper head:

    python experiments/drafters/deep/grow_checkpoint.py /tmp/grown2 --layers 2
    python -m specbench logger=none strategy.checkpoint=/tmp/grown2     # beside: python -m specbench logger=none
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch
from omegaconf import OmegaConf

from specbench.config import CONF_DIR
from specbench.models.loading import load_model, resolve_spec
from specbench.strategies.checkpoints import PACKAGED
from specbench.train.drafters import EagleTrainer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--start", default=str(PACKAGED / "eagle-smollm2-135m"))
    args = ap.parse_args()
    spec = resolve_spec(OmegaConf.to_container(OmegaConf.load(CONF_DIR / "model" / "smollm2-135m.yaml")), "target")
    target = load_model(spec, "cpu", torch.float32)
    torch.manual_seed(0)  # the new layers' other weights, as a fresh head draws them
    trainer = EagleTrainer(target, "smollm2-135m", (), draft_vocab=8192, num_layers=args.layers, init_from=args.start)
    trainer.load_start(trainer.init_from)
    trainer.module.half().save(args.out)  # fp16, as the shipped head
    shutil.copy(Path(args.start) / "vocab_counts.json", Path(args.out) / "vocab_counts.json")
    print(f"wrote {args.out}: {args.layers} decoder layers from {args.start}")


if __name__ == "__main__":
    main()
