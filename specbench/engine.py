"""The decode loop every strategy shares: prefill, then propose -> verify -> accept -> commit.

The engine knows nothing about tokenization or about any particular strategy: it sees token ids,
a target runner, a Proposer (whose class flags say what it needs) and a Verifier. Every tensor
is batch-first. Rows finish independently (EOS or max_new_tokens) and accept ragged numbers of
drafts; a finished row stays in the batch with its length frozen, so shapes never change
inside a batch, and its results are no longer counted. Under continuous batching (engine.scheduler=continuous,
`generate(..., concurrency=C)`) a finished row's slot takes the next waiting prompt at the end of the step: the
prompt is prefilled alone into that row's cache (the runner's and the draft's `narrow`), the proposer admits it
(`Proposer.admit`), and the batch keeps its shape.

One host synchronisation per step: the accepted counts and emitted tokens come to the host
together, because finishing rows (EOS, length) is host logic. Phase times come from CUDA events
on a GPU (read once per batch) and from the host clock on the CPU.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch

from specbench.models.decoder import ForwardOutput
from specbench.strategies.base import DecodeState, Proposer
from specbench.verify import Verifier


@dataclass
class RowResult:
    """What one prompt got: its tokens, its acceptance counters and its timeline (seconds from batch start)."""

    output_ids: list[int] = field(default_factory=list)
    drafts: int = 0  # verification steps that had a draft (K > 0) while the row was active
    draft_tokens: int = 0
    accepted_tokens: int = 0  # bonus excluded
    accepted_at: list[int] = field(default_factory=list)  # [K] steps whose draft i was accepted
    k_drafted: int = 0  # sum over the row's steps of the K drafted (a chain's length, a tree's depth bound k)
    accepted_histogram: list[int] = field(default_factory=list)  # [K+1] steps that accepted exactly n drafts
    ttft_s: float = 0.0
    latency_s: float = 0.0
    emissions: list[tuple[float, int]] = field(default_factory=list)  # (time, tokens emitted then)
    finished_by: str = ""  # "eos" | "length"


@dataclass
class BatchTiming:
    prefill_s: float = 0.0  # the target's prefill and the drafter's ingestion of the same prompts (draft_prefill_s)
    draft_prefill_s: float = 0.0  # of which the drafter's (a draft model with its own cache reading the prompts)
    draft_s: float = 0.0
    verify_s: float = 0.0  # target forward + acceptance
    total_s: float = 0.0
    steps: int = 0
    draft_forwards: int = 0  # the proposer's draft forwards over the batch's steps


class _PhaseClock:
    """Marks phase boundaries without synchronising: CUDA events on a GPU, perf_counter elsewhere."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.marks: list[object] = []

    def mark(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def unmark(self) -> None:
        """Forget the last mark."""
        self.marks.pop()

    def seconds(self) -> list[float]:
        """Durations between consecutive marks (synchronises once on CUDA)."""
        if self.cuda:
            if self.marks:
                self.marks[-1].synchronize()
            return [a.elapsed_time(b) / 1e3 for a, b in zip(self.marks, self.marks[1:])]
        return [b - a for a, b in zip(self.marks, self.marks[1:])]


class Engine:
    """Runs one strategy over batches of prompts (token ids)."""

    def __init__(
        self,
        target_runner,  # specbench.models.runner: DecoderRunner | TransformersRunner
        proposer: Proposer,
        verifier: Verifier,
        *,
        max_new_tokens: int,
        eos_ids: set[int],
        device: torch.device,
    ) -> None:
        self.target = target_runner
        self.proposer = proposer
        self.verifier = verifier
        self.max_new_tokens = max_new_tokens
        self.eos_ids = eos_ids
        self.device = device
        self.want_hidden = proposer.pass_hidden_states_to_model
        self.hidden_layers = proposer.hidden_layers()
        self.min_cache_len = 0  # see reserve()
        # target-only decoding (k = 0) runs its next forward ahead of the step's sync, as a drafter's catch-up does
        # (Proposer.prelaunch), where that forward replays a CUDA graph: there the graph reads the whole cache whatever
        # attn_len says, so the forward is the one the next step would run. The CPU tests turn it on over the graph
        # runner's eager path, which reads the whole cache too.
        self.target_runs_ahead = device.type == "cuda" and bool(getattr(target_runner, "capture", False))

    def cache_len(self, prompt_len: int) -> int:
        """Slots a row needs: prompt + new tokens + one full verify window (every draft node) past the last commit."""
        return prompt_len + self.max_new_tokens + self.proposer.nodes_per_step + 1

    def reserve(self, max_prompt_len: int) -> None:
        """Size every batch's caches for the longest prompt of the run, so caches (and the CUDA graphs
        captured over them) are allocated once, by the warm-up, and never regrown while timing."""
        self.min_cache_len = max(self.min_cache_len, self.cache_len(max_prompt_len))

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], on_step: Callable[[int], None] | None = None,
                 mm_inputs: list[dict | None] | None = None,
                 concurrency: int | None = None) -> tuple[list[RowResult], BatchTiming]:
        """Decode `prompts`; one RowResult per prompt, in order. `on_step(tokens_emitted)` is called after every step
        (progress bars).

        concurrency None (engine.scheduler=static): every prompt is a row from the start, prefilled together, and the
        batch ends when its last row does. concurrency = C (continuous): C rows (slots); when a row finishes and
        prompts are waiting, at the end of that step its slot takes the next one, prefilled alone ([1, P], so its
        prefill does not depend on which requests share the batch) into the slot's cache rows, and the batch ends
        when the queue is empty and every row has finished. A request's times then count from its admission.

        `mm_inputs` (one per prompt, None for text-only rows) carries what a multimodal runner needs
        beyond token ids (pixel values, grid sizes); runners that have `begin_batch` receive it (static only).
        """
        continuous = concurrency is not None
        if continuous and (mm_inputs is not None or hasattr(self.target, "begin_batch")):
            raise ValueError("continuous batching takes text-only targets: a multimodal runner's images are per batch")
        bsz = min(concurrency, len(prompts)) if continuous else len(prompts)
        k, dev = self.proposer.k, self.device
        pmax = max(len(p) for p in prompts)
        max_len = max(self.cache_len(pmax), self.min_cache_len)
        tokens = torch.zeros((bsz, max_len), dtype=torch.long, device=dev)
        results: list[RowResult] = [self._row() for _ in prompts]
        slot_of = list(range(bsz))  # the prompt each row (slot) holds
        plens = [0 if continuous else len(prompts[i]) for i in slot_of]  # continuous: set by _refill
        if not continuous:
            for b, i in enumerate(slot_of):
                tokens[b, : plens[b]] = torch.tensor(prompts[i], dtype=torch.long)
        self.target.allocate(bsz, max_len)
        if hasattr(self.target, "begin_batch"):
            self.target.begin_batch(prompts, mm_inputs)
        if self.proposer.adaptive and self.proposer.tree == "chain":  # before the clock starts (trees run eagerly)
            self._warm_verify_widths(bsz, max_len)
        clock, admit_clock = _PhaseClock(dev), _PhaseClock(dev)
        t0 = time.perf_counter()
        origin = [0.0] * bsz  # when each row's request started (seconds from t0)
        lengths_host = [p + 1 for p in plens]
        active = [not continuous] * bsz  # continuous: every row starts empty and takes a prompt in _refill
        state = DecodeState(tokens=tokens, lengths=torch.tensor(lengths_host, device=dev), lengths_host=lengths_host,
                            prompt_lengths=plens, active=torch.tensor(active, device=dev), max_len=max_len,
                            active_host=list(active), mm_inputs=mm_inputs)
        timing = BatchTiming()
        if continuous:  # 0) every row's first request, each prefilled alone
            self.proposer.begin(state)
            queue = deque(range(len(prompts)))
            admit_clock.mark()
            emitted = self._refill(state, prompts, queue, slot_of, results, active, t0, origin)
            admit_clock.mark()
        else:  # 0) prefill: right-padded prompts; the first token comes from each row's last prompt position
            out, first, positions = self._prefill_forward(state, 0, bsz)
            first_host = first.tolist()  # sync: the first token exists now
            ttft = time.perf_counter() - t0
            for b, tok in enumerate(first_host):
                self._first_token(results[b], tok, ttft, b, active)
            state.active_host = list(active)
            state.active = torch.tensor(active, device=dev)
            state.target_hidden, state.target_layer_hidden = out.hidden, out.layer_hidden
            state.target_positions = positions
            # the drafter ingests the prompts (a draft model's own prefill): prefill, not decode, time, as under
            # continuous batching, where each admission's target and draft prefills are timed together
            start_clock = _PhaseClock(dev)
            start_clock.mark()
            self.proposer.start(state, out.hidden)
            start_clock.mark()
            timing.prefill_s, emitted = ttft, bsz
        if on_step:
            on_step(emitted)
        forwards_before = self.proposer.draft_forwards
        steps = torch.arange(k + 1, device=dev)
        # the host's per-row lengths and active flags go back to the device through one pinned buffer,
        # copied without blocking the host (pageable torch.tensor(list) copies block on CUDA)
        staging = torch.empty((2, bsz), dtype=torch.long, pin_memory=dev.type == "cuda")
        staged = staging.numpy()  # written through numpy: no torch op (and no tensor from a list) on the host
        # the next step's catch-up forward before the sync (Proposer.prelaunch): the step's result then comes back
        # through a pinned buffer and an event, so the wait is for the verify only, not for that forward
        # (target-only: its next 1-token forward, the same way)
        ahead = self.proposer.prelaunches and not continuous
        ahead_target = k == 0 and self.target_runs_ahead and not continuous
        result_host = (torch.empty((bsz, k + 2), dtype=torch.long, pin_memory=dev.type == "cuda")
                       if ahead or ahead_target else None)
        ready = torch.cuda.Event() if result_host is not None and dev.type == "cuda" else None  # after each copy
        marked = 0  # the next step's phase marks made already: 1 (a prelaunch's draft start), 2 (target-only's too)
        target_out: ForwardOutput | None = None  # target-only's next forward, run ahead

        while any(active):
            if marked < 1:  # else the mark before the run-ahead began this step's draft phase
                clock.mark()
            # 1) propose K drafts per row
            draft = self.proposer.propose(state)
            if marked < 2:
                clock.mark()
            marked = 0
            n_drafted = draft.tokens.shape[1]  # K_step: k, or fewer under an adaptive K schedule
            if draft.chain:
                # 2) verify: one target forward over [pending token, d_1..d_K] at positions L-1 .. L-1+K
                positions = state.lengths[:, None] - 1 + steps[: n_drafted + 1]  # [B, K+1]
                if target_out is not None:  # target-only: run ahead at these positions, with these tokens
                    out, target_out = target_out, None
                else:
                    inputs = torch.cat([state.tokens.gather(1, positions[:, :1]), draft.tokens], dim=1)
                    out = self.target(inputs, positions, attn_len=max(lengths_host) + k,
                                      want_hidden=self.want_hidden, hidden_layers=self.hidden_layers)
                # 3) accept: n drafts per row, then the correction or bonus token
                verdict = self.verifier(draft.tokens, draft.probs, out.logits)
                emitted = torch.cat([draft.tokens, verdict.next_token[:, None]], dim=1)  # [B, K+1]
            else:
                positions, out, verdict, emitted = self._verify_tree(state, draft, lengths_host)
            emitted.scatter_(1, verdict.accepted[:, None], verdict.next_token[:, None])  # d_1..d_n, next
            state.tokens.scatter_(1, positions[:, : k + 1] + 1, emitted)  # beyond a row's new length it is garbage
            clock.mark()
            # 4) commit on the host: the one synchronisation of the step
            result = torch.cat([verdict.accepted[:, None], emitted], dim=1)  # [B, K+2]
            if result_host is not None and draft.chain and result.shape[1] == k + 2:
                result_host.copy_(result, non_blocking=True)
                if ready is not None:
                    ready.record()
                clock.mark()  # the next step's draft phase starts with the forward run ahead
                lengths_after = state.lengths + (verdict.accepted + 1) * state.active  # an active row's, on the device
                if ahead_target:
                    if out.hidden is not None or out.layer_hidden:
                        # the run-ahead replays the graph whose outputs these are (views): commit() gets this step's
                        out = ForwardOutput(logits=out.logits, hidden=None if out.hidden is None else out.hidden.clone(),
                                            layer_hidden=[h.clone() for h in out.layer_hidden])
                    clock.mark()  # target-only drafts nothing: its verify phase starts here too
                    at = lengths_after[:, None] - 1  # the pending token each row's next step feeds
                    target_out = self.target(state.tokens.gather(1, at), at, attn_len=max(lengths_host) + 2,
                                             want_hidden=self.want_hidden, hidden_layers=self.hidden_layers)
                    marked = 2
                elif self.proposer.prelaunch(state, lengths_after):
                    marked = 1
                else:
                    clock.unmark()  # nothing ran: the loop's own mark begins the next step
                if ready is not None:
                    ready.synchronize()
                host = result_host.tolist()
            else:
                host = result.tolist()
            now = time.perf_counter() - t0
            old_lengths = list(lengths_host)
            accepted_host = [row[0] for row in host]
            emitted_count = 0
            for b in range(bsz):
                if not active[b]:
                    continue
                row = results[slot_of[b]]
                n = host[b][0]
                new = host[b][1 : n + 2][: self.max_new_tokens - len(row.output_ids)]
                if self.eos_ids:
                    for j, tok in enumerate(new):
                        if tok in self.eos_ids:
                            new = new[: j + 1]
                            break
                if k > 0:
                    row.drafts += 1
                    row.draft_tokens += draft.tokens.shape[1]  # nodes verified (K for a chain)
                    row.accepted_tokens += n
                    for i in range(n):
                        row.accepted_at[i] += 1
                    row.k_drafted += n_drafted if draft.chain else self.proposer.step_k  # a tree: the depth expanded
                    row.accepted_histogram[n] += 1
                row.output_ids.extend(new)
                row.emissions.append((now - origin[b], len(new)))
                lengths_host[b] += len(new)
                emitted_count += len(new)
                self._maybe_finish(row, b, active, now - origin[b])
            staged[0], staged[1] = lengths_host, active
            on_device = staging.to(dev, non_blocking=True)
            state.lengths, state.active = on_device[0], on_device[1].bool()
            state.target_hidden, state.target_layer_hidden, state.target_positions = out.hidden, out.layer_hidden, positions
            self.proposer.schedule_next(accepted_host, state.active_host)  # the rows that drafted in this step
            state.active_host = list(active)
            self.proposer.commit(state, verdict, accepted_host, old_lengths)
            timing.steps += 1
            if continuous and queue and not all(active):  # 5) continuous: finished rows' slots take waiting prompts
                admit_clock.mark()
                emitted_count += self._refill(state, prompts, queue, slot_of, results, active, t0, origin)
                admit_clock.mark()
            if on_step:
                on_step(emitted_count)
        if not marked:  # else the run-ahead's first mark ends the last step (its forward is never used)
            clock.mark()
        elif marked == 2:
            clock.unmark()
        phases = clock.seconds()  # per step: draft, verify, commit (+ the gap to the next step's mark)
        timing.draft_s = sum(phases[0::3])
        timing.verify_s = sum(phases[1::3])
        if continuous:
            timing.prefill_s = sum(admit_clock.seconds()[0::2])
        else:
            timing.draft_prefill_s = start_clock.seconds()[0]
            timing.prefill_s += timing.draft_prefill_s
        timing.total_s = time.perf_counter() - t0
        timing.draft_forwards = self.proposer.draft_forwards - forwards_before
        return results, timing

    def _row(self) -> RowResult:
        k = self.proposer.k
        return RowResult(accepted_at=[0] * k, accepted_histogram=[0] * (k + 1) if k > 0 else [])

    def _prefill_forward(self, state: DecodeState, lo: int,
                         hi: int) -> tuple[ForwardOutput, torch.Tensor, torch.Tensor]:
        """Rows lo..hi-1 hold new prompts (state.tokens, prompt_lengths, and on the device lengths = prompt length
        + 1): one target forward over them (the whole batch, or one admitted row narrowed to its cache rows) and
        their first tokens, written after each prompt on the device. Returns the forward, the first tokens
        [hi - lo] and the positions [hi - lo, P]."""
        n, dev = hi - lo, self.device
        plens = state.prompt_lengths[lo:hi]
        p = max(plens)
        positions = torch.arange(p, device=dev).expand(n, p)
        last = state.lengths[lo:hi, None] - 2  # [n, 1]: each prompt's last position (its first token is not in yet)
        with nullcontext() if (lo, hi) == (0, state.batch_size) else self.target.narrow(lo, hi):
            out = self.target(state.tokens[lo:hi, :p], positions, attn_len=p, logits_at=last,
                              want_hidden=self.want_hidden, hidden_layers=self.hidden_layers)
        first = self.verifier(state.tokens[lo:hi, :0], None, out.logits).next_token  # [n]
        state.tokens[torch.arange(lo, hi, device=dev), last[:, 0] + 1] = first
        return out, first, positions

    def _first_token(self, row: RowResult, token: int, ttft: float, b: int, active: list[bool]) -> None:
        row.output_ids.append(token)
        row.ttft_s = ttft
        row.emissions.append((ttft, 1))
        self._maybe_finish(row, b, active, ttft)

    def _refill(self, state: DecodeState, prompts: list[list[int]], queue: deque[int], slot_of: list[int],
                results: list[RowResult], active: list[bool], t0: float, origin: list[float]) -> int:
        """Continuous batching: the finished (or still empty) rows take the next waiting prompts. Each is prefilled
        alone ([1, P], narrowed to its cache rows), but a round's prefills are launched back to back: one upload of
        their prompts, one host sync for their first tokens. A request that ends at its first token frees its row
        for another round. Returns the first tokens emitted; the device's lengths and active flags follow."""
        emitted = 0
        while queue and not all(active):
            free = [b for b, on in enumerate(active) if not on][: len(queue)]
            reqs = [queue.popleft() for _ in free]
            start = time.perf_counter() - t0
            for b, i in zip(free, reqs):
                p = len(prompts[i])
                slot_of[b], origin[b] = i, start
                state.prompt_lengths[b], state.lengths_host[b], active[b] = p, p + 1, True
            state.active_host = list(active)
            # one upload per round: the new prompts and every row's length (the prefills and admit() read them)
            wide = max(len(state.lengths_host), *(len(prompts[i]) for i in reqs))
            staged = self._upload([prompts[i] + [0] * (wide - len(prompts[i])) for i in reqs]
                                  + [state.lengths_host + [0] * (wide - len(state.lengths_host))])
            state.lengths = staged[-1, : len(active)]
            for j, (b, i) in enumerate(zip(free, reqs)):
                state.tokens[b, : len(prompts[i])] = staged[j, : len(prompts[i])]
            firsts = []
            for b in free:
                out, first, positions = self._prefill_forward(state, b, b + 1)
                self.proposer.admit(state, b, b + 1, out.hidden, out.layer_hidden, positions)
                firsts.append(first)
            host = torch.cat(firsts).tolist()  # the round's one sync
            now = time.perf_counter() - t0
            for b, token in zip(free, host):
                self._first_token(results[slot_of[b]], token, now - origin[b], b, active)
            emitted += len(free)
        flags = self._upload([state.lengths_host, [int(on) for on in active]])
        state.lengths, state.active = flags[0], flags[1].bool()
        state.active_host = list(active)
        return emitted

    def _upload(self, rows: list[list[int]]) -> torch.Tensor:
        """[R, W] int64 on the device from equal-length host lists, through pinned memory, without blocking the
        host (a pageable torch.tensor(list, device=cuda) waits for every queued kernel first)."""
        host = torch.tensor(rows, dtype=torch.long)
        return host.pin_memory().to(self.device, non_blocking=True) if self.device.type == "cuda" else host

    def _verify_tree(self, state: DecodeState, draft, lengths_host: list[int]):
        """2)-3) for a tree: one target forward over [pending, node 0..N-1] (node j at cache slot L+j, RoPE position
        L-1+depth, seeing its ancestors), the accepted path, and its KV entries moved to slots L, L+1, ... (no
        recompute). Returns (positions [B, K+1] of the path's tokens, the forward, the verdict, the path's tokens
        [B, K+1] with room for the next token)."""
        from specbench.verify import tree_layout

        k, n = self.proposer.k, draft.tokens.shape[1]
        dev = draft.tokens.device
        depth, mask = tree_layout(draft.parents)  # [B, 1+N], [B, 1+N, 1+N]
        start = state.lengths[:, None] - 1
        inputs = torch.cat([state.tokens.gather(1, start), draft.tokens], dim=1)
        out = self.target(inputs, start + depth, attn_len=max(lengths_host) + n, slots=start + torch.arange(n + 1, device=dev),
                          tree_mask=mask, want_hidden=self.want_hidden, hidden_layers=self.hidden_layers)
        verdict = self.verifier.tree(draft.tokens, draft.parents, draft.probs, out.logits, (depth, mask))
        path = verdict.path[:, :k]  # [B, K] node indices in depth order (-1 past the accepted length)
        if path.shape[1] < k:  # fewer nodes than depths (num_nodes < k): no path is longer than the tree
            path = torch.nn.functional.pad(path, (0, k - path.shape[1]), value=-1)
        walked = torch.arange(k, device=dev)[None] < verdict.accepted[:, None]
        dst = state.lengths[:, None] + torch.arange(k, device=dev)  # the path's positions L, L+1, ...
        src = torch.where(walked, state.lengths[:, None] + path.clamp(min=0), dst)  # node j was written at slot L+j
        self.target.move_kv(src, dst)
        emitted = torch.cat([draft.tokens.gather(1, path.clamp(min=0)), verdict.next_token[:, None]], dim=1)  # [B, K+1]
        positions = start + torch.arange(k + 1, device=dev)
        if out.hidden is not None or out.layer_hidden:  # the features along the path, in position order
            cols = torch.cat([torch.zeros_like(path[:, :1]), path.clamp(min=0) + 1], dim=1)[..., None]  # [B, K+1, 1]
            along = lambda h: h.gather(1, cols.expand(-1, -1, h.shape[-1]))  # noqa: E731
            out = type(out)(logits=out.logits, hidden=None if out.hidden is None else along(out.hidden),
                            layer_hidden=[along(h) for h in out.layer_hidden])
        return positions, out, verdict, emitted

    def _warm_verify_widths(self, bsz: int, max_len: int) -> None:
        """Adaptive K verifies [B, K_step + 1] with K_step anywhere in 1..k. Under CUDA graphs (GraphedRunner) each
        width is its own graph, captured when first met: run every chain width once here, before the batch's clock
        starts, so that the untimed warm-up captures them all and the timed run only replays (on a warm runner this
        replays k graphs; the phase clocks start after it). Inputs sit at the runner's scratch slot, which no real position uses, so no live cache
        entry changes; the outputs are dropped."""
        from specbench.models.cuda_graphs import GraphedRunner

        if not isinstance(self.target, GraphedRunner):
            return
        for width in range(2, self.proposer.k + 2):
            scratch = torch.full((bsz, width), self.target.scratch_slot, dtype=torch.long, device=self.device)
            self.target(torch.zeros_like(scratch), scratch, attn_len=max_len, want_hidden=self.want_hidden,
                        hidden_layers=self.hidden_layers)

    def _maybe_finish(self, row: RowResult, b: int, active: list[bool], now: float) -> None:
        if row.output_ids and row.output_ids[-1] in self.eos_ids:
            row.finished_by = "eos"
        elif len(row.output_ids) >= self.max_new_tokens:
            row.finished_by = "length"
        else:
            return
        active[b] = False
        row.latency_s = now
