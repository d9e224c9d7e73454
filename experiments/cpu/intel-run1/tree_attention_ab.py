"""The CPU's bit-invariant tree attention (the torch forward and its per-query attention) of the checkout against
another revision's, in one process: the default's 5-node tree verify (root, two children, two grandchildren under the
first) of SmolLM2-135M in bf16 at a 300-token prefix, each form in turns with a 1-token step and a 5-token chain, 20 rounds of 3 forwards, median ms per forward.
First it checks that both forms give the same logits, bit for bit, also after each other's forwards.

    OMP_NUM_THREADS=2 python experiments/cpu/intel-run1/tree_attention_ab.py <revision, e.g. main>
"""

from __future__ import annotations

import importlib.util
import statistics
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT), str(ROOT / "experiments" / "cpu")]  # this checkout's specbench, whatever is installed
from bench_tree_verify import PREFIX, forwards_at, time_in_turns  # noqa: E402

import specbench.models.decoder as dec  # noqa: E402
from specbench.models.loading import load_model, resolve_spec  # noqa: E402


def other_decoder(revision: str) -> types.ModuleType:
    """specbench/models/decoder.py as it is at `revision`, imported as a module of its own."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{revision}:specbench/models/decoder.py"],
                            capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "decoder_other.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("decoder_other", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["decoder_other"] = module
    spec.loader.exec_module(module)
    return module


def main(revision: str) -> None:
    other = other_decoder(revision).DecoderRunner
    # a form: the torch forward and the per-query attention it calls (their signatures change between revisions)
    forms = {revision: (other._forward_torch, other._attend_per_query),
             "checkout": (dec.DecoderRunner._forward_torch, dec.DecoderRunner._attend_per_query)}

    def use(runner: dec.DecoderRunner, name: str) -> None:
        for method, fn in zip(("_forward_torch", "_attend_per_query"), forms[name]):
            setattr(runner, method, types.MethodType(fn, runner))

    torch.manual_seed(0)
    model = load_model(resolve_spec({"name": "smollm2-135m"}, "target"), torch.device("cpu"), torch.bfloat16).model
    runner = dec.DecoderRunner(model)
    assert runner.cpu_invariant, "this CPU has no oneDNN bf16 GEMMs"
    runner.allocate(1, 512)
    with torch.inference_mode():
        runner(torch.randint(0, 40000, (1, PREFIX)), torch.arange(PREFIX)[None], attn_len=PREFIX)
        forwards = forwards_at(runner, [-1, 0, 0, 1, 1], chain=5)
        logits = []
        for name in [revision, "checkout", revision, "checkout"]:
            use(runner, name)
            logits.append(forwards["5-node tree"]().logits.clone())
        print("bit-identical, in turns:", all(torch.equal(logits[0], x) for x in logits))
        tree = forwards["5-node tree"]
        timed = {name: (lambda name=name: (use(runner, name), tree())) for name in forms}  # the form set, then a verify
        ms = time_in_turns({**timed, "1 token": forwards["1 token"], "5-token chain": forwards["5-token chain"]}, 20)
    for name, m in ms.items():
        label = f"5-node tree, {name}'s attention" if name in forms else name
        print(f"{label}: median {statistics.median(m):.1f} ms (min {min(m):.1f})")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "main")
