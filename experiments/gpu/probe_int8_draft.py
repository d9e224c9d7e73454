"""Would int8 weights make a GPU draft model's passes cheaper? (issue 9: the 0.6B draft's passes are ~40% of a
batch-1 step of the 8B.) For Qwen3-0.6B's and Qwen3-1.7B's linear shapes at 1 and 4 rows on one GPU: cuBLAS's bf16
product against torch's weight-only int8 product (`torch._weight_int8pack_mm`, one scale per output row, as
specbench.models.decoder.Int8Linear uses on the CPU), us a call (CUDA events, median of 7 rounds of 200 calls), the
int8 result's largest relative error against the dequantized weight's bf16 product, and the bytes each streams.
Run on the device: python3 experiments/gpu/probe_int8_draft.py"""
import torch
import torch.nn.functional as F

from specbench.models.decoder import int8_rows

MODELS = {  # name: [(N, K)] per layer (fused q/k/v, o, fused gate/up, down) and the LM head
    "qwen3-0.6b": [(2048 + 2 * 1024, 1024), (1024, 2048), (2 * 3072, 1024), (1024, 3072), (151936, 1024)],
    "qwen3-1.7b": [(2048 + 2 * 1024, 2048), (2048, 2048), (2 * 6144, 2048), (2048, 6144), (151936, 2048)],
}


def timed(f, rounds=7, n=200):
    for _ in range(20):
        f()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(rounds):
        start.record()
        for _ in range(n):
            f()
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end) / n * 1e3)
    return sorted(out)[rounds // 2]


def main():
    dev = torch.device("cuda")
    print(torch.__version__, torch.cuda.get_device_name(), "has _weight_int8pack_mm:", hasattr(torch, "_weight_int8pack_mm"))
    g = torch.Generator().manual_seed(0)
    for model, shapes in MODELS.items():
        for rows in (1, 4):
            tot = {"bf16": 0.0, "int8": 0.0}
            for n, k in shapes:
                w = (torch.randn(n, k, generator=g) / k**0.5).to(torch.bfloat16)
                q, s = int8_rows(w)
                w, q, s = w.to(dev), q.to(dev), s.to(dev)
                x = torch.randn(rows, k, generator=g).to(torch.bfloat16).to(dev)
                bf = timed(lambda: F.linear(x, w))
                try:
                    i8 = timed(lambda: torch._weight_int8pack_mm(x, q, s))
                    ref = F.linear(x.float(), q.float() * s.float()[:, None])
                    err = float(((torch._weight_int8pack_mm(x, q, s).float() - ref).abs().max() / ref.abs().max()))
                except (RuntimeError, NotImplementedError) as e:
                    i8, err = float("nan"), str(e).splitlines()[0][:80]
                tot["bf16"] += bf
                tot["int8"] += i8
                print(f"{model} rows {rows} {n:6d} x {k:5d}: bf16 {bf:7.1f} us ({2 * n * k / 1e6:.1f} MB), int8 "
                      f"{i8:7.1f} us ({n * k / 1e6:.1f} MB), int8 error {err}", flush=True)
            print(f"{model} rows {rows}: one layer + LM head, bf16 {tot['bf16']:.1f} us, int8 {tot['int8']:.1f} us")


if __name__ == "__main__":
    main()
