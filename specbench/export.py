"""Export a specbench-trained EAGLE head to the speculators format (config.json + model.safetensors).

    python -m specbench.export <our checkpoint dir> <out dir> --verifier HuggingFaceTB/SmolLM2-135M-Instruct

Heads with a reduced draft vocabulary (`specbench.train ... strategy.draft_vocab=N`, like the shipped
eagle-smollm2-135m since 2026-12-02) have no speculators form and are refused with a message saying why.

The tensors are written unchanged (same dtype), renamed to speculators' EAGLE names; what our head does
beyond speculators' EAGLE-1 is stated in the config's `specbench` block (see strategies/formats.py).
`strategy=eagle strategy.checkpoint=<out dir>` loads the export back bit-identically. No model loads.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specbench.errors import ConfigError, read_json_object
from specbench.strategies.formats import export_speculators


def _raise_if_reduced_vocabulary(checkpoint: str) -> None:
    """Our head with a reduced draft vocabulary (train's strategy.draft_vocab) has no speculators equivalent:
    speculators' `eagle` has no draft vocabulary, and its `eagle3` needs EAGLE-3's layer, which ours is not."""
    from specbench.strategies.checkpoints import checkpoint_files

    _, config_path = checkpoint_files(checkpoint, "eagle")
    config = read_json_object(Path(config_path), f"checkpoint {checkpoint!r}", "specbench's drafter config")
    if config.get("format") == "specbench" and config.get("draft_vocab_size"):
        raise ConfigError(f"export: {checkpoint!r} drafts over a reduced vocabulary (draft_vocab_size="
                          f"{config['draft_vocab_size']}, d2t) with an EAGLE-1 layer; speculators' eagle format has no "
                          f"draft vocabulary and its eagle3 format needs EAGLE-3's layer, so it has no speculators "
                          f"form. Allowed: an EAGLE head trained with strategy.draft_vocab=null")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specbench.export", description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="our EAGLE checkpoint: a directory, or a name in specbench/checkpoints/")
    parser.add_argument("out", help="directory to write config.json and model.safetensors into")
    parser.add_argument("--verifier", default=None,
                        help="the target's hub id for speculators_config.verifier (default: the preset's hub id, else "
                             "the checkpoint's target label)")
    args = parser.parse_args(argv)
    try:
        _raise_if_reduced_vocabulary(args.checkpoint)
        out = export_speculators(args.checkpoint, args.out, args.verifier)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out / 'config.json'} and {out / 'model.safetensors'} (speculators eagle)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
