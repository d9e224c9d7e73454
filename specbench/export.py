"""Export a specbench-trained EAGLE head to the speculators format (config.json + model.safetensors).

    python -m specbench.export eagle-smollm2-135m out/eagle-smollm2-135m-speculators
    python -m specbench.export <our checkpoint dir> <out dir> --verifier HuggingFaceTB/SmolLM2-135M-Instruct

The tensors are written unchanged (same dtype), renamed to speculators' EAGLE names; what our head does
beyond speculators' EAGLE-1 is stated in the config's `specbench` block (see strategies/formats.py).
`strategy=eagle strategy.checkpoint=<out dir>` loads the export back bit-identically. No model loads.
"""

from __future__ import annotations

import argparse
import sys

from specbench.errors import ConfigError
from specbench.strategies.formats import export_speculators


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specbench.export", description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="our EAGLE checkpoint: a directory, or a name in specbench/checkpoints/")
    parser.add_argument("out", help="directory to write config.json and model.safetensors into")
    parser.add_argument("--verifier", default=None,
                        help="the target's hub id for speculators_config.verifier (default: the preset's hub id, else "
                             "the checkpoint's target label)")
    args = parser.parse_args(argv)
    try:
        out = export_speculators(args.checkpoint, args.out, args.verifier)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out / 'config.json'} and {out / 'model.safetensors'} (speculators eagle)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
