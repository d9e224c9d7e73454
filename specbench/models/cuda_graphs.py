"""CUDA graphs for the decoder's small forwards: the target's verify (T = k+1) and the drafter's steps.

`GraphedRunner` wraps a DecoderRunner with the same interface (allocate, forward/__call__,
vocab_size, device, dtype, max_len). A forward of T <= `max_graph_tokens` new tokens (a tree: T <=
`max_tree_tokens`) is replayed from a graph captured once per key (batch bucket, T, logits_at
columns, want_hidden, hidden_layers, and for a tree whether it comes as a mask or as ancestor paths
of width E): inputs are copied into static buffers (rows past the batch padded to the bucket and
pointed at a scratch slot), and the outputs are views of the graph's static outputs, valid until
the next call with the same key. A one-row prefill (batch 1, or one admitted row under narrow()) is padded to a
PREFILL_BUCKETS length and replayed too, on a scratch row of cache copied into its row after (`_prefill`: eagerly
launched, such a prefill waited on the host: 13.9 ms for Qwen3-8B at 128 tokens, of which the GPU worked 5.6;
experiments/gpu/probe_prefill-run1.txt). Larger forwards (batched prefills) run eagerly.

Trees (a verify over N draft nodes, a dynamic tree's frontier forward) are graphed like chains: their
cache slots and their tree (mask [B, T, T] or path [B, T, E]) are static inputs too, and the mask is
turned into paths inside the graph (decode_ref.tree_paths: device ops of fixed shape).

Static shapes: the cache is allocated once for the largest bucket and slot count seen (it only
grows; growing drops the graphs), attention reads each row's valid slots from the positions on the
device (the Triton decode kernel), so `attn_len` is ignored inside a graph. No host
synchronisation: the copies into the static buffers stay on the device.

On the CPU (or `capture=False`) the same code path runs eagerly over the static buffers, which is
how the CPU tests cover it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from specbench.models.decoder import DECODE_KERNEL_MAX_T, DecoderRunner, ForwardOutput
from specbench.models.runner import Runner, RunnerWrapper

BATCH_BUCKETS = (1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256)
# one-row prefills (continuous batching's admissions, batch-1 runs) are padded to one of these lengths and replayed
PREFILL_BUCKETS = (64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)
MAX_TREE_TOKENS = 64  # trees of up to this many tokens per row (pending token included) replay graphs
SLOT_ROUND = 128  # cache slots are allocated in multiples of this (+1 scratch slot), so batches reuse graphs


_CAPTURES = 0  # graphs captured in this process, by every GraphedRunner


def graph_captures() -> int:
    """How many CUDA graphs this process has captured so far (run() reports those captured while timing)."""
    return _CAPTURES


def prefill_bucket(t: int) -> int | None:
    """The padded length a one-row prefill of t tokens replays at; None above the largest (it runs eagerly)."""
    return next((b for b in PREFILL_BUCKETS if b >= t), None)


def bucket(batch_size: int, buckets: tuple[int, ...] = BATCH_BUCKETS) -> int:
    for b in buckets:
        if b >= batch_size:
            return b
    return -(-batch_size // 64) * 64


@dataclass
class _Graph:
    tokens: torch.Tensor
    positions: torch.Tensor
    logits_at: torch.Tensor | None
    slots: torch.Tensor | None = None  # trees: [bb, T] cache slots
    tree: torch.Tensor | None = None  # trees: mask [bb, T, T] bool or path [bb, T, E] int64
    graph: Any = None  # torch.cuda.CUDAGraph when captured
    out: ForwardOutput | None = None
    replays: int = 0
    extra: dict = field(default_factory=dict)


class GraphedRunner(RunnerWrapper):
    """A DecoderRunner whose small forwards replay CUDA graphs (see the module docstring)."""

    def __init__(self, runner: DecoderRunner, capture: bool | None = None, max_graph_tokens: int = DECODE_KERNEL_MAX_T,
                 buckets: tuple[int, ...] = BATCH_BUCKETS, max_tree_tokens: int = MAX_TREE_TOKENS,
                 prefill_graphs: bool | None = None) -> None:
        self.runner = runner
        self.capture = runner.device.type == "cuda" if capture is None else capture
        # one-row prefills padded to PREFILL_BUCKETS and replayed (default: where graphs are captured; the CPU tests
        # turn it on to run the same code eagerly)
        self.prefill_graphs = self.capture if prefill_graphs is None else prefill_graphs
        self.scratch: tuple[torch.Tensor, torch.Tensor] | None = None  # one row of K and V cache for those prefills
        self.max_graph_tokens = max_graph_tokens
        self.max_tree_tokens = max_tree_tokens
        self.buckets = buckets
        self.graphs: dict[tuple, _Graph] = {}
        self.pool = None
        self.captures = 0
        self.eager = False  # inside narrow(): every forward runs eagerly on the narrowed rows

    # the runner interface (vocab_size, device, max_len and the rest: RunnerWrapper) ---------------------
    @property
    def dtype(self) -> torch.dtype:
        return self.runner.dtype

    @property
    def rows(self) -> int:
        return 0 if self.runner.k_cache is None else self.runner.k_cache.shape[1]

    @property
    def scratch_slot(self) -> int:
        """A slot no real position uses (allocate keeps one past every requested length)."""
        return self.runner.max_len - 1

    def allocate(self, batch_size: int, max_len: int) -> None:
        rows = bucket(batch_size, self.buckets)
        if self.runner.k_cache is not None and self.rows >= rows and self.max_len >= max_len + 1:
            return
        rows = max(rows, self.rows)
        slots = max(-(-(max_len + 1) // SLOT_ROUND) * SLOT_ROUND, self.max_len)
        self.drop_graphs()  # they point at the old cache
        self.scratch = None
        self.runner.allocate(rows, slots)

    def drop_graphs(self) -> None:
        """Forget every captured graph, for when a tensor they read is replaced (the cache, a rope table): drop
        them AND their memory pool. Capturing into the pool of graphs that no longer exist trips the caching
        allocator (use_count assert, issue 9), and a failed capture leaves the RNG in capture mode for every
        later job of the process."""
        if self.graphs and self.capture:
            torch.cuda.synchronize(self.device)  # no replay may still be reading what is freed
        self.graphs.clear()
        self.pool = None

    @contextmanager
    def narrow(self, lo: int, hi: int) -> Iterator[GraphedRunner]:
        """DecoderRunner.narrow, forwards run eagerly meanwhile (the graphs hold the whole cache's rows)."""
        with self.runner.narrow(lo, hi):
            self.eager = True
            try:
                yield self
            finally:
                self.eager = False

    def __call__(self, *args: Any, **kwargs: Any) -> ForwardOutput:
        return self.forward(*args, **kwargs)

    def move_kv(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        self.runner.move_kv(src, dst)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attn_len: int | None = None,
                logits_at: torch.Tensor | None = None, want_hidden: bool = False,
                hidden_layers: tuple[int, ...] = (), slots: torch.Tensor | None = None,
                tree_mask: torch.Tensor | None = None, tree_path: torch.Tensor | None = None) -> ForwardOutput:
        bsz, t = tokens.shape
        tree = tree_mask if tree_mask is not None else tree_path
        if (self.prefill_graphs and bsz == 1 and t > self.max_graph_tokens and attn_len == t and tree is None
                and slots is None and self.runner.k_cache is not None):
            padded = prefill_bucket(t)
            if padded is not None and padded < self.runner.max_len:  # the last slot is the scratch slot
                return self._prefill(tokens, padded, logits_at, want_hidden, hidden_layers)
        limit = self.max_graph_tokens if tree is None else self.max_tree_tokens
        if t > limit or bsz > self.rows or self.eager:
            return self.runner(tokens, positions, attn_len=attn_len, logits_at=logits_at, want_hidden=want_hidden,
                               hidden_layers=hidden_layers, slots=slots, tree_mask=tree_mask, tree_path=tree_path)
        bb = bucket(bsz, self.buckets)
        kind = None if tree is None else ("mask" if tree_mask is not None else "path", tree.shape[2])
        key = (bb, t, None if logits_at is None else logits_at.shape[1], bool(want_hidden), tuple(hidden_layers), kind)
        g = self.graphs.get(key)
        if g is None:
            g = self._build(key)
        g.tokens[:bsz].copy_(tokens)
        g.positions[:bsz].copy_(positions)
        if bsz < bb:
            g.positions[bsz:].fill_(self.scratch_slot)  # padding rows write only the scratch slot
        if tree is not None:
            g.slots[:bsz].copy_(positions if slots is None else slots)
            g.tree[:bsz].copy_(tree)
            if bsz < bb:
                g.slots[bsz:].fill_(self.scratch_slot)
                self._root_only(g.tree[bsz:])
        if logits_at is not None:
            g.logits_at[:bsz].copy_(logits_at)
        if g.graph is not None:
            g.graph.replay()
        else:
            g.out = self._run(g, key)
        g.replays += 1
        out = g.out
        return ForwardOutput(logits=out.logits[:bsz], hidden=None if out.hidden is None else out.hidden[:bsz],
                             layer_hidden=[h[:bsz] for h in out.layer_hidden])

    def _prefill(self, tokens: torch.Tensor, padded: int, logits_at: torch.Tensor | None, want_hidden: bool,
                 hidden_layers: tuple[int, ...]) -> ForwardOutput:
        """A one-row prefill of t tokens at positions 0..t-1 (attn_len == t says so), padded to `padded` tokens and
        replayed from a graph captured once per (padded, logits_at columns, want_hidden, hidden_layers). The graph
        writes a scratch row of cache, whatever row (narrow()) the prefill is for: its K and V are then copied into
        that row's first `padded` slots. The pad tokens sit after the prompt (causal: no real token sees them) and
        their slots are rewritten by decoding before anything reads them, as with right-padded static batches.
        Same inputs, same graph: a prompt's prefill does not depend on the batch, the slot or the scheduler.
        Outputs are copies (the next admission replays the same graph)."""
        t = tokens.shape[1]
        key = ("prefill", padded, None if logits_at is None else logits_at.shape[1], bool(want_hidden),
               tuple(hidden_layers))
        if self.scratch is None:
            kc = self.runner.k_cache
            shape = (kc.shape[0], 1, *kc.shape[2:])
            self.scratch = (kc.new_zeros(shape), self.runner.v_cache.new_zeros(shape))
        g = self.graphs.get(key)
        if g is None:
            g = self._build_prefill(key)
        g.tokens[:, :t].copy_(tokens)
        g.tokens[:, t:].zero_()
        if logits_at is not None:
            g.logits_at.copy_(logits_at)
        if g.graph is not None:
            g.graph.replay()
        else:
            with self._on_scratch():
                g.out = self._run_prefill(g, key)
        g.replays += 1
        self.runner.k_cache[:, :1, :, :padded].copy_(self.scratch[0][:, :, :, :padded])
        self.runner.v_cache[:, :1, :, :padded].copy_(self.scratch[1][:, :, :, :padded])
        out = g.out
        cut = slice(None) if logits_at is not None else slice(0, t)
        hidden = None if out.hidden is None else out.hidden[:, :t].clone()
        return ForwardOutput(logits=out.logits[:, cut].clone(), hidden=hidden,
                             layer_hidden=[h[:, :t].clone() for h in out.layer_hidden])

    @contextmanager
    def _on_scratch(self) -> Iterator[None]:
        """The runner's cache is the scratch row meanwhile (what a prefill graph is captured on)."""
        saved = self.runner.k_cache, self.runner.v_cache
        self.runner.k_cache, self.runner.v_cache = self.scratch
        try:
            yield
        finally:
            self.runner.k_cache, self.runner.v_cache = saved

    def _run_prefill(self, g: _Graph, key: tuple) -> ForwardOutput:
        _, padded, _, want_hidden, hidden_layers = key
        return self.runner(g.tokens, g.positions, attn_len=padded, logits_at=g.logits_at, want_hidden=want_hidden,
                           hidden_layers=hidden_layers)

    def _build_prefill(self, key: tuple) -> _Graph:
        padded, n_at = key[1], key[2]
        dev = self.device
        g = _Graph(tokens=torch.zeros((1, padded), dtype=torch.long, device=dev),
                   positions=torch.arange(padded, device=dev)[None],
                   logits_at=None if n_at is None else torch.zeros((1, n_at), dtype=torch.long, device=dev))
        if self.capture:
            with self._on_scratch():
                self._capture(g, lambda: self._run_prefill(g, key))
        self.graphs[key] = g
        return g

    # capture ----------------------------------------------------------------------------------
    def _capture(self, g: _Graph, run: Any) -> None:
        """Warm `run` up on a side stream (Triton compiles, cuBLAS picks), then capture it into g.graph."""
        dev = self.device
        stream = torch.cuda.Stream(device=dev)
        stream.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(stream):
            for _ in range(2):
                run()
        torch.cuda.current_stream(dev).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            g.out = run()
        if self.pool is None:
            self.pool = graph.pool()
        g.graph = graph
        self.captures += 1
        global _CAPTURES
        _CAPTURES += 1

    def _run(self, g: _Graph, key: tuple) -> ForwardOutput:
        _, _, _, want_hidden, hidden_layers, kind = key
        mask = kind is not None and kind[0] == "mask"
        return self.runner(g.tokens, g.positions, attn_len=self.runner.max_len, logits_at=g.logits_at,
                           want_hidden=want_hidden, hidden_layers=hidden_layers, slots=g.slots,
                           tree_mask=g.tree if mask else None, tree_path=None if mask else g.tree)

    def _root_only(self, tree: torch.Tensor) -> None:
        """A padding row's tree: every token is its own root (a mask that sees only itself, paths of the scratch
        slot), so it reads and writes nothing but the scratch slot whatever a larger batch left there."""
        if tree.dtype == torch.bool:
            tree.copy_(torch.eye(tree.shape[-1], dtype=torch.bool, device=tree.device).expand_as(tree))
        else:
            tree.fill_(self.scratch_slot)

    def _build(self, key: tuple) -> _Graph:
        bb, t, n_at, kind = key[0], key[1], key[2], key[5]
        dev = self.device
        # static inputs start at the scratch slot, so warm-up and capture never touch a live cache entry
        g = _Graph(tokens=torch.zeros((bb, t), dtype=torch.long, device=dev),
                   positions=torch.full((bb, t), self.scratch_slot, dtype=torch.long, device=dev),
                   logits_at=None if n_at is None else torch.zeros((bb, n_at), dtype=torch.long, device=dev))
        if kind is not None:
            g.slots = torch.full((bb, t), self.scratch_slot, dtype=torch.long, device=dev)
            g.tree = (torch.zeros((bb, t, t), dtype=torch.bool, device=dev) if kind[0] == "mask"
                      else torch.zeros((bb, t, kind[1]), dtype=torch.long, device=dev))
            self._root_only(g.tree)
        if self.capture:
            self._capture(g, lambda: self._run(g, key))
        self.graphs[key] = g
        return g


def maybe_graphed(runner: Runner, enabled: bool, capture: bool | None = None) -> Runner:
    """`runner` under CUDA graphs when `enabled` and it is our DecoderRunner; unchanged otherwise.

    enabled on the CPU runs GraphedRunner's code path eagerly (capture only happens on CUDA)."""
    if not enabled or isinstance(runner, GraphedRunner) or not isinstance(runner, DecoderRunner):
        return runner
    return GraphedRunner(runner, capture=capture)


def cuda_graphs_default(setting: Any, device: torch.device) -> bool:
    """engine.cuda_graphs: true/false, or auto/None = true on CUDA, false on the CPU."""
    if setting in (None, "auto"):
        return torch.device(device).type == "cuda"
    return bool(setting)
