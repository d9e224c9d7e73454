"""Triton kernels, each beside the torch reference it must equal bit for bit.

- `rejection`: the acceptance step (greedy matching and rejection sampling) of `specbench.verify`.

Nothing is imported here, so that `import specbench.kernels` neither needs triton nor fixes
whether its kernels are interpreted: TRITON_INTERPRET=1 is read when `specbench.kernels.rejection`
is first imported.
"""
