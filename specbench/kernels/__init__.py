"""Triton kernels, each beside the torch reference it must equal bit for bit.

- `rejection`: the acceptance step (greedy matching and rejection sampling) of `specbench.verify`.
- `decode`: the decoder's fused steps on CUDA (add + RMSNorm, q/k-norm + rotary + cache write, decode
  attention over each row's valid cache, SiLU * up); torch references in `decode_ref`.
- `skinny_gemm`: y = x W^T for M <= 16 rows (decode/verify), split-K partials consumed by add_rmsnorm.

Nothing is imported here, so that `import specbench.kernels` neither needs triton nor fixes
whether its kernels are interpreted: TRITON_INTERPRET=1 is read when `specbench.kernels.rejection`
is first imported.
"""
