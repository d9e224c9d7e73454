"""The proposer base: the drafting loop every strategy shares, switched by class flags.

The engine owns the committed tokens, the target model and acceptance; a proposer turns the
engine's state into a draft per row (N tokens with a parent index each, and their probabilities q
when it samples) and hears back how many were accepted. This base holds the loop: ingest the
committed tokens the draft has not seen (catch-up), then K draft forwards (`drafting = "chain"`),
one forward that drafts K at once (`"parallel"`), or none (`"lookup"`, model-free: `lookup(state)`
gives a chain of K tokens or a whole tree as a Draft); pick each
token by argmax, or at T > 0 by sampling q through verify.logits_to_probs / sample_from; roll the
draft's cache back to what the target accepted. A strategy supplies its draft forward (by default
a causal LM runner, `self.runner`) and sets flags; each flag changes what the base or the engine
does (DESIGN.md's table):

| flag | effect |
| --- | --- |
| pass_hidden_states_to_model | the engine returns the target's hidden states; the base keeps them by position and feeds the draft, with each token x_p, the feature at p-1 (and, while drafting, its own output feature) |
| owns_kv_cache | the draft keeps a per-row cache: the base ingests the prompt in start(), catches up on every unseen token, and rolls back to the accepted prefix in commit(); without it the draft sees only the pending token |
| samples | at T > 0 drafts are sampled from q and q is returned; otherwise argmax, treated as one-hot q |
| cuda_graphs | the draft runner is captured in CUDA graphs when engine.cuda_graphs is on |
| one_extra_forward_pass + drop_first_drafted_tokens (settings) | the seed PR's scheme: the accepted tail and the bonus token go in two forwards and the first one's draft is dropped (K+1 forwards per step) instead of one catch-up forward (K) |

Adaptive K (settings k_schedule, confidence_threshold, k_by_batch_size; chains only). strategy.k stays the most
a step drafts (it sizes the caches and the verify window); each step drafts K_step <= k tokens, one number for the
whole batch, because the verify forward has one shape [B, K_step + 1]:

- k_schedule=fixed: K_step = k.
- k_schedule=heuristic (transformers' num_assistant_tokens_schedule="heuristic"): K starts at k for each batch;
  after a step in which every active row accepted all its drafts K += 2, otherwise K -= 1 (never under 1, never
  over k). At batch 1 this is transformers' rule, capped at k.
- k_schedule=confidence (transformers' assistant_confidence_threshold): drafting stops after a draft d_i whose
  probability under the draft, q(d_i) (softmax of its logits when it drafts greedily), is under
  confidence_threshold in EVERY active row (d_i is still verified; one host sync per draft forward). A chain
  drafter (draft_model, eagle, layer_skip) stops its loop there; a parallel drafter (medusa) drafts K at once and
  truncates after the first such position; a lookup drafter (ngram) has no probabilities and refuses it.
- k_by_batch_size={rows: K, ...} (vLLM's num_speculative_tokens_per_batch_size): the most K_step may be, by the
  number of ACTIVE rows: the value of the largest key <= active rows (k when no key is). Combines with the schedules.
Trees verify a fixed node count per step: topk and static trees refuse adaptive K; a dynamic tree (EAGLE-2) takes
k_schedule=confidence as a stop on its expansion: once it holds num_nodes nodes, it stops going deeper when every
active row's likeliest frontier path has a cumulative draft probability under the threshold (fewer draft forwards;
the rerank keeps num_nodes, so the verify shape is unchanged). mean K reports the depth expanded.

The next step's catch-up ahead of the sync (`prelaunches`): under CUDA graphs a chain drafter with its own cache and
the base's own forward feeds 2 tokens at each catch-up (fixed_catch_up), at each row's new length, which the device
knows before the host does (lengths + accepted + 1). The engine then runs that forward (`prelaunch`) right after the
verify, before it waits for the step's result, so the GPU goes from the verify to the next draft without waiting for
the host's bookkeeping and launches (experiments/gpu/profile-run1: 0.7-0.8 ms a step of the 8B's with a 0.6B draft on
an H100). The forward's inputs are the same as propose() would give it for every row that goes on (a row that
finished gets garbage past its end, which nothing reads), so the output does not change.
"""

from __future__ import annotations

import math
from abc import ABC
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, ClassVar

import torch

from specbench.errors import ConfigError
from specbench.models.loading import LoadedModel
from specbench.strategies import trees
from specbench.strategies.trees import topk_parents
from specbench.verify import SamplingParams, Verdict, argmax_last, exp_noise, logits_to_probs, sample_from

DRAFTING = ("chain", "parallel", "lookup")
K_SCHEDULES = ("fixed", "heuristic", "confidence")


def raise_if_vocab_too_large(draft_vocab: int, target_vocab: int, draft_name: str, target_name: str) -> None:
    if draft_vocab > target_vocab:
        raise ConfigError(
            f"draft {draft_name!r} has a vocabulary of {draft_vocab} entries, larger than target {target_name!r}'s "
            f"{target_vocab}; allowed: a draft vocabulary <= the target's (ids beyond the target's cannot be verified). "
            f"Pick a draft of the target's family (draft=auto uses the preset's pair)"
        )


@dataclass
class BuildContext:
    """What a strategy may use to build itself: loaded models, the device and the sampling rule."""

    target: LoadedModel
    target_runner: Any  # specbench.models.runner.Runner over the target
    draft: LoadedModel | None  # loaded by run() only for strategies with needs_draft_model
    sampling: SamplingParams
    device: torch.device
    backend: str = "auto"
    cuda_graphs: bool = False  # engine.cuda_graphs: drafters with the cuda_graphs flag capture their runner
    batch_invariant: bool = True  # the strategy's own decoder runners use the batch-invariant kernels (CUDA)


@dataclass
class DecodeState:
    """The engine's view of one batch, as a proposer sees it. Committed tokens only.

    Row b holds lengths[b] committed tokens (prompt + output). The last of them is *pending*: it has
    been emitted but the target has not processed it yet; the next verify forward starts with it.
    """

    tokens: torch.Tensor  # [B, S] int64, committed tokens; garbage at and beyond lengths[b]
    lengths: torch.Tensor  # [B] int64 on the device
    lengths_host: list[int]  # the same, on the host (the engine syncs once per step anyway)
    prompt_lengths: list[int]
    active: torch.Tensor  # [B] bool, rows still generating
    max_len: int  # cache slots per row
    active_host: list[bool] | None = None  # the same as `active`, on the host (None = every row active)
    mm_inputs: list[dict | None] | None = None  # per row: images etc. for multimodal runners (None = text)
    # from the last target forward, for strategies with pass_hidden_states_to_model:
    target_hidden: torch.Tensor | None = None  # [B, T, H] final-norm hidden states of that forward
    target_layer_hidden: list[torch.Tensor] | None = None  # [B, T, H] each, layers asked by hidden_layers()
    target_positions: torch.Tensor | None = None  # [B, T] positions of that forward's inputs

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]


@lru_cache(maxsize=64)
def chain_parents(n: int, device: torch.device) -> torch.Tensor:
    """[N] int64 -1, 0, 1, ..., N-2: node i hangs under node i-1, node 0 under the pending token."""
    return torch.arange(-1, n - 1, device=device)


@dataclass
class Draft:
    """N draft tokens per row, node i under node parents[b, i] (-1 = the pending token)."""

    tokens: torch.Tensor  # [B, N] int64
    probs: torch.Tensor | None = None  # [B, N, V_draft] q when the strategy samples at T > 0, else None (one-hot)
    parents: torch.Tensor | None = None  # [B, N] int64; None = a chain (filled in by __post_init__)
    chain: bool = field(init=False, default=True)  # known on the host, so the engine never syncs to ask

    def __post_init__(self) -> None:
        bsz, n = self.tokens.shape
        if self.parents is None:
            self.parents = chain_parents(n, self.tokens.device).expand(bsz, n)
        else:
            self.chain = False
            if self.parents.shape != self.tokens.shape:
                raise ValueError(f"Draft.parents has shape {tuple(self.parents.shape)}; tokens {tuple(self.tokens.shape)}")


@dataclass
class DraftOutput:
    """What one draft forward gives the base, at the last input column of each row.

    A drafter over a reduced vocabulary (EAGLE-3's d2t) gives logits over that vocabulary only, with the target id
    of each column: a chain or a tree picks, samples and stops on those columns (8,192 instead of 49,152 for the
    shipped head), and only its tokens and q go back to the target's ids (q zero elsewhere); parallel drafters
    take `full()`."""

    logits: torch.Tensor  # [B, N, V_draft]: N = 1 for a chain step, K for a parallel drafter
    hidden: torch.Tensor | None = None  # [B, 1, H] the draft's output feature (fed back by hidden-state drafters)
    vocab_ids: torch.Tensor | None = None  # [V_draft] the target id of each logit column; None: column v is id v
    vocab_size: int = 0  # with vocab_ids: the target's vocabulary, the last axis of q and of full()

    def ids(self, columns: torch.Tensor) -> torch.Tensor:
        """Logit columns [...] -> target token ids [...]."""
        return columns if self.vocab_ids is None else self.vocab_ids[columns]

    def on_target_ids(self, x: torch.Tensor, fill: float) -> torch.Tensor:
        """[..., V_draft] over the columns -> [..., V] over the target's ids, `fill` off the reduced vocabulary."""
        if self.vocab_ids is None:
            return x
        return x.new_full((*x.shape[:-1], self.vocab_size), fill).index_copy_(-1, self.vocab_ids, x)

    def full(self) -> DraftOutput:
        """The same output with logits over the target's ids (-inf off a reduced vocabulary: q = 0 there)."""
        return self if self.vocab_ids is None else DraftOutput(self.on_target_ids(self.logits, float("-inf")), self.hidden)


class Proposer(ABC):
    """Base class of every strategy: the drafting loop (see the module docstring). A subclass sets the flags and
    either gives the base a runner (`self.runner`, a causal LM over [B, T]) or overrides draft_forward / lookup."""

    # DESIGN.md's table, one flag per row
    pass_hidden_states_to_model: ClassVar[bool] = False
    owns_kv_cache: ClassVar[bool] = False
    samples: ClassVar[bool] = False
    cuda_graphs: ClassVar[bool] = False
    drafting: ClassVar[str] = "chain"  # one of DRAFTING
    needs_draft_model: ClassVar[bool] = False  # run() loads cfg.draft for it (draft=self: the target drafts itself)
    # its drafts read earlier requests' outputs (suffix's global trie), so a prompt's acceptance depends on which
    # requests finished before it: on the batch size and the scheduler, not only on the prompt
    reads_other_requests: ClassVar[bool] = False
    # it drafts with the target's own weights (layer_skip's first layers): it needs the whole target on every rank,
    # so engine.shard_on_load (each rank builds only its share) is refused for it
    drafts_with_target_weights: ClassVar[bool] = False

    def __init__(self, ctx: BuildContext, k: int, name: str = "", one_extra_forward_pass: bool = False,
                 drop_first_drafted_tokens: bool = False, tree: str = "chain", top_k: int = 1, num_nodes: int = 0,
                 tree_choices: list[list[int]] | None = None, k_schedule: str = "fixed",
                 confidence_threshold: float | Mapping[str, float] = 0.4, k_by_batch_size: Mapping[int, int] | None = None,
                 **options: Any) -> None:
        if options:
            raise ConfigError(f"strategy {name or type(self).__name__} got unknown settings {sorted(options)}")
        type(self).raise_if_bad_tree(name, tree, top_k, num_nodes, k, tree_choices)  # auto's settings fit a tree
        if k > 0:  # strategy none (k = 0) drafts nothing: the schedule settings are ignored
            type(self).raise_if_bad_schedule(name, k_schedule, confidence_threshold, k_by_batch_size, k, tree)
        tree = trees.resolve_auto(tree, ctx.target_runner)  # tree=auto: chain or dynamic, as the target verifies
        if isinstance(confidence_threshold, Mapping):  # tree=auto's threshold for the shape it resolved to
            confidence_threshold = float(confidence_threshold[tree])
        self.k_schedule, self.confidence_threshold = k_schedule, confidence_threshold
        # [(rows, K)] ascending by rows: the K cap for a step with at least `rows` active rows
        self.k_by_batch_size = sorted((int(r), int(v)) for r, v in (k_by_batch_size or {}).items())
        self.k_now = k  # k_schedule=heuristic: this batch's current K
        self.step_k = k  # the K the last propose() drafted (a chain's length; a tree's depth bound)
        type(self).raise_if_bad_scheme(name, one_extra_forward_pass, drop_first_drafted_tokens)
        if tree == "chain":  # a chain reads neither (tree=auto resolved to a chain)
            top_k, num_nodes = 1, 0
        self.tree, self.top_k, self.num_nodes = tree, top_k, num_nodes
        self.static_tree = trees.static_tree(trees.resolve_choices(tree_choices, k)) if tree == "static" else None
        self.static_parents = None if self.static_tree is None else torch.tensor([self.static_tree.parents], device=ctx.device)
        self.k = k
        self.name = name
        self.sampling = ctx.sampling
        self.device = ctx.device
        self.one_extra_forward_pass = one_extra_forward_pass
        self.drop_first_drafted_tokens = drop_first_drafted_tokens
        self.use_graphs = ctx.cuda_graphs and type(self).cuda_graphs  # the cuda_graphs flag, read here only
        # under captured graphs every catch-up after the first step feeds 2 tokens (one graph shape, warmed before
        # timing). Re-feeding a token the draft already wrote in an earlier decode step rewrites its cache entry bit
        # for bit (batch-invariant kernels); the prompt's entries (written by the prefill, on other kernels) are never
        # re-fed, so the first step keeps its single token. A dynamic tree feeds K+1 from the first step on (its tree
        # went to scratch slots, so up to K+1 committed tokens are new; positions below a prompt's end clamp to it).
        self.fixed_catch_up = self.use_graphs and ctx.device.type == "cuda"
        self.runner: Any = None  # the draft's causal LM runner (draft_model, layer_skip); None for heads
        self.seen: list[int] = []  # per row: committed positions < seen[b] are in the draft's cache
        self.features: torch.Tensor | None = None  # [B, S, H] the target's features by position (hidden-state drafters)
        self.floor = torch.zeros((1, 1), dtype=torch.long, device=ctx.device)  # [B, 1] each row's prompt length
        # small index tensors a step needs again and again (catch-up offsets, last-column indices), made once: each
        # launch between the step's sync and the first draft forward leaves the GPU idle on a CUDA host
        self._consts: dict[tuple, torch.Tensor] = {}
        self._pre: DraftOutput | None = None  # the next step's catch-up forward, run ahead by prelaunch()
        self.last_logits: torch.Tensor | None = None  # the catch-up forward's logits (parallel: all K positions)
        self.draft_forwards = 0  # draft forwards run by propose() (results.json: draft forwards per step)
        # the draft's own noise, independent of the verifier's (seed + 1); reseed() restarts it
        self.generator = torch.Generator(device=ctx.device)
        self.reseed()

    @property
    def adaptive(self) -> bool:
        """Whether K_step can differ from k (the verify forward then takes widths 2 .. k+1)."""
        return self.k > 0 and (self.k_schedule != "fixed" or bool(self.k_by_batch_size))

    @property
    def prelaunches(self) -> bool:
        """Whether the engine may run the next step's catch-up forward before its sync (`prelaunch`; the module
        docstring): a chain drafter whose every catch-up after the first steps feeds 2 tokens (fixed_catch_up) through
        the base's own draft forward and cache, without features or an adaptive K."""
        return (self.fixed_catch_up and self.owns_kv_cache and self.drafting == "chain" and self.tree == "chain"
                and not self.one_extra_forward_pass and not self.adaptive and not self.pass_hidden_states_to_model
                and type(self).draft_forward is Proposer.draft_forward and type(self)._propose is Proposer._propose)

    def prelaunch(self, state: DecodeState, lengths: torch.Tensor) -> bool:
        """Before the step's sync (the engine calls it when `prelaunches`): the next step's catch-up forward at each
        row's new length `lengths` [B] (on the device: the length before the step + accepted + 1 for an active row),
        kept for the next propose(). Only once every row is 2 tokens past its prompt (before the step, so after it
        too), where propose() feeds the same 2 tokens; else it does nothing and says False."""
        if not self._past_prompts(state, 2):
            return False
        positions = lengths[:, None] + self._catch_up_offsets(2, 0)
        # attn_len: at most every row's length after the step (ignored inside a graph, which reads the whole cache)
        attn_len = max(state.lengths_host) + 2 * self.k + 1
        self._pre = self.draft_forward(state.tokens.gather(1, positions), positions, None, attn_len)
        return True

    @property
    def nodes_per_step(self) -> int:
        """The most cache slots past a row's length one step writes: the draft nodes a verify forward holds besides
        the pending token (K for a chain, at most K * top_k for tree=topk, a lookup's tree included), or a dynamic
        tree's draft-side scratch if that is more."""
        if self.tree == "dynamic":
            return max(self.num_nodes, (self.k - 1) * self.top_k)
        if self.static_tree is not None:
            return len(self.static_tree.parents)
        return self.k * self.top_k if self.tree == "topk" else self.k

    def reseed(self) -> None:
        """Restart the draft's random stream. run() calls it after the untimed warm-up, so that
        engine.warmup never changes sampled tokens."""
        self.generator.manual_seed(self.sampling.seed + 1)

    # -- checks before any model loads (run.plan calls these) ------------------------------------------------
    @classmethod
    def validate(cls, cfg: Mapping[str, Any]) -> None:
        """The strategy's settings on their own. Subclasses extend it."""
        k, name = cfg.get("k"), cfg.get("name")
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ConfigError(f"strategy.k={k!r} for strategy {name!r}; allowed: an integer >= 1")
        cls.raise_if_bad_scheme(name, cfg.get("one_extra_forward_pass", False), cfg.get("drop_first_drafted_tokens", False))
        cls.raise_if_bad_tree(name, cfg.get("tree", "chain"), cfg.get("top_k", 1), cfg.get("num_nodes", 0), k,
                              cfg.get("tree_choices"))
        cls.raise_if_bad_schedule(name, cfg.get("k_schedule", "fixed"), cfg.get("confidence_threshold", 0.4),
                                  cfg.get("k_by_batch_size"), k, cfg.get("tree", "chain"))

    @classmethod
    def raise_if_bad_schedule(cls, name: str, schedule: Any, threshold: Any, by_batch: Any, k: int, tree: Any) -> None:
        """k_schedule, confidence_threshold and k_by_batch_size (adaptive K, see the module docstring)."""
        if schedule not in K_SCHEDULES:
            raise ConfigError(f"strategy.k_schedule={schedule!r} for strategy {name!r}; allowed: {', '.join(K_SCHEDULES)}")
        probability = lambda x: isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x < 1  # noqa: E731
        if isinstance(threshold, Mapping):  # tree=auto: one threshold per shape it may resolve to
            if tree != "auto" or set(threshold) != {"chain", "dynamic"} or not all(map(probability, threshold.values())):
                raise ConfigError(f"strategy.confidence_threshold={dict(threshold)!r} for strategy {name!r} with "
                                  f"tree={tree}; allowed: a number strictly between 0 and 1, or with tree=auto a "
                                  f"mapping {{chain: x, dynamic: y}} of two such numbers (the threshold of the shape "
                                  f"it resolves to)")
        elif schedule == "confidence" and not probability(threshold):
            raise ConfigError(f"strategy.confidence_threshold={threshold!r} for strategy {name!r} with "
                              f"k_schedule=confidence; allowed: a number strictly between 0 and 1")
        if schedule == "confidence":
            if cls.drafting == "lookup":
                raise ConfigError(f"strategy.k_schedule=confidence for strategy {name!r}; allowed only for drafters "
                                  f"with a draft distribution (draft_model, eagle, layer_skip, medusa): a lookup draft "
                                  f"has no probability of its own tokens. Use fixed, heuristic or k_by_batch_size")
        if by_batch is not None:
            items = list(by_batch.items()) if isinstance(by_batch, Mapping) else None
            ok = lambda x, lo: isinstance(x, int) and not isinstance(x, bool) and x >= lo  # noqa: E731
            if not items or not all(ok(r, 1) and ok(v, 1) and v <= k for r, v in items):
                raise ConfigError(f"strategy.k_by_batch_size={by_batch!r} for strategy {name!r} with k={k}; allowed: "
                                  f"null or a mapping {{active rows: K}} with integer keys >= 1 and values 1..k "
                                  f"(e.g. {{1: {k}, 8: 1}}; the largest key <= the active rows applies)")
        if (schedule == "heuristic" or by_batch is not None) and tree != "chain":
            raise ConfigError(f"strategy.k_schedule={schedule} / k_by_batch_size={by_batch!r} with strategy.tree={tree} "
                              f"for strategy {name!r}; allowed: heuristic and k_by_batch_size with tree=chain only (a "
                              f"tree verifies a fixed node count per step); trees take k_schedule=fixed, and "
                              f"tree=dynamic or auto also k_schedule=confidence")
        if schedule == "confidence" and tree not in ("chain", "dynamic", "auto"):
            raise ConfigError(f"strategy.k_schedule=confidence with strategy.tree={tree} for strategy {name!r}; allowed "
                              f"with tree=chain (stop drafting), tree=dynamic (stop expanding when every path "
                              f"probability is under the threshold) or tree=auto (one of the two); a topk or static "
                              f"tree has a fixed shape")

    @classmethod
    def raise_if_bad_tree(cls, name: str, tree: Any, top_k: Any, num_nodes: Any = 0, k: int = 1,
                          tree_choices: Any = None) -> None:
        """strategy.tree and its settings (top_k, num_nodes, tree_choices) for this strategy; see trees.py."""
        trees.check_tree(name, cls.drafting, tree, top_k, num_nodes, tree_choices, k)

    @classmethod
    def raise_if_bad_scheme(cls, name: str, extra: Any, drop: Any) -> None:
        """one_extra_forward_pass and drop_first_drafted_tokens: booleans, both or neither, on chain drafters."""
        for key, value in (("one_extra_forward_pass", extra), ("drop_first_drafted_tokens", drop)):
            if not isinstance(value, bool):
                raise ConfigError(f"strategy.{key}={value!r} for strategy {name!r}; allowed: true or false")
        if (extra or drop) and not (cls.drafting == "chain" and cls.owns_kv_cache):
            raise ConfigError(f"strategy.one_extra_forward_pass / drop_first_drafted_tokens for strategy {name!r}; "
                              f"allowed only for chain drafters with their own KV cache (draft_model, eagle, layer_skip)")
        if extra != drop:
            raise ConfigError(f"strategy.one_extra_forward_pass={extra} with drop_first_drafted_tokens={drop} for "
                              f"strategy {name!r}; allowed: both true (the seed PR's scheme: the extra forward drafts the "
                              f"bonus token's position, which the target already decided, so it is dropped) or both false")

    @classmethod
    def validate_for_target(cls, cfg: Mapping[str, Any], target: Any, backend: str) -> None:
        """The settings against the target's sizes known before loading (a preset, a local config.json)."""

    @classmethod
    def validate_draft(cls, cfg: Mapping[str, Any], draft: Any, target: Any, greedy: bool) -> None:
        """needs_draft_model: the draft's spec against the target's before loading (run.plan). By default a draft
        vocabulary larger than the target's is refused where both sizes are known (presets, local configs)."""
        if draft.vocab_size and target.vocab_size:
            raise_if_vocab_too_large(draft.vocab_size, target.vocab_size, draft.label, target.label)

    @classmethod
    def checkpoint_record(cls, cfg: Mapping[str, Any], target: Any) -> dict[str, Any] | None:
        """What results.json records of the drafter's checkpoint (files, SHA-256); None without one."""
        return None

    # -- what a strategy supplies ----------------------------------------------------------------------------
    def hidden_layers(self) -> tuple[int, ...]:
        """Target layers whose outputs this strategy reads (EAGLE-3 style fusion); () = none."""
        return ()

    def target_features(self, hidden: torch.Tensor | None, layers: list[torch.Tensor] | None) -> torch.Tensor:
        """[B, T, H] the draft's input feature from one target forward (EAGLE-3 fuses `layers`)."""
        assert hidden is not None, "the engine returns hidden states to strategies with pass_hidden_states_to_model"
        return hidden

    def allocate(self, batch_size: int, max_len: int) -> None:
        """owns_kv_cache: size the draft's cache for a batch."""
        self.runner.allocate(batch_size, max_len)

    def draft_forward(self, tokens: torch.Tensor, positions: torch.Tensor, hidden: torch.Tensor | None,
                      attn_len: int, slots: torch.Tensor | None = None,
                      tree_path: torch.Tensor | None = None) -> DraftOutput:
        """One draft forward over tokens [B, T] at positions [B, T] (hidden [B, T, H]: the feature before each
        token, for hidden-state drafters); logits at each row's last column. Default: the causal LM runner.
        A dynamic tree's frontier (tree_path given): tokens at cache `slots` [B, T], each seeing its ancestors'
        slots tree_path [B, T, E] (DecoderRunner.forward), and logits at every column."""
        if tree_path is not None:
            return DraftOutput(logits=self.runner(tokens, positions, attn_len=attn_len, slots=slots,
                                                  tree_path=tree_path).logits)
        t = tokens.shape[1]  # a 1-token step needs no column index (one launch less per draft forward)
        last = self._const(("last", tokens.shape[0], t), lambda: torch.full((tokens.shape[0], 1), t - 1,
                                                                          device=tokens.device)) if t > 1 else None
        return DraftOutput(logits=self.runner(tokens, positions, attn_len=attn_len, logits_at=last).logits)

    def lookup(self, state: DecodeState) -> torch.Tensor | Draft:
        """drafting = "lookup": drafts without a model, either [B, K] tokens (a chain) or, with tree=topk, a Draft
        (a tree of at most nodes_per_step nodes per row, at most K deep: the engine sizes caches and the accepted
        path by them)."""
        raise NotImplementedError(f"{type(self).__name__} sets drafting='lookup' but has no lookup()")

    # -- the loop --------------------------------------------------------------------------------------------
    def start(self, state: DecodeState, prefill_hidden: torch.Tensor | None) -> None:
        """A new batch whose prompts (and first token) are committed, prefilled together (state.target_*): begin()
        then admit() every row."""
        self.begin(state)
        self.admit(state, 0, state.batch_size, state.target_hidden, state.target_layer_hidden, state.target_positions)

    def begin(self, state: DecodeState) -> None:
        """A new batch of state.batch_size rows (slots), before any row is admitted: size the per-row state."""
        b = state.batch_size
        self.features = None
        self.floor = torch.zeros((b, 1), dtype=torch.long, device=self.device)  # [B, 1] each row's prompt length
        self.seen = [0] * b
        self._pre = None  # a forward run ahead for the last batch's step after its last
        if self.owns_kv_cache or self.runner is not None:  # a runner always has slots; only owns_kv_cache fills them
            self.allocate(b, state.max_len)
        self.k_now = self.k  # the heuristic schedule starts each batch at k (transformers' "heuristic_transient")

    def admit(self, state: DecodeState, lo: int, hi: int, hidden: torch.Tensor | None,
              layer_hidden: list[torch.Tensor] | None, positions: torch.Tensor | None) -> None:
        """Rows lo..hi-1 start new prompts: the whole batch at its start, or (continuous batching) a slot whose request
        finished, taking the next. Their prompts and first token are committed in `state` (its host lists already
        say so); hidden, layer_hidden and positions are those rows' prefill ([hi - lo, P, ...]). A draft with its own
        cache ingests the prompts here (their last token too, unless the extra forward pass will); seen = the
        positions it holds. A strategy with per-row state of its own extends this (super().admit first)."""
        rows = slice(lo, hi)
        self._keep_features(state, hidden, layer_hidden, positions, rows)
        # the prompt's cache entries are the prefill's (other kernels than a decode step's): propose() never re-feeds
        # them, so that a self-draft's cache stays bit-identical to the target's (batch-invariant kernels)
        plens = state.prompt_lengths[rows]
        self.floor[rows, 0] = state.lengths[rows] - 1  # the prompt length, already on the device (no host copy)
        first = 1 if self.pass_hidden_states_to_model else 0  # x_0 has no feature before it
        if not self.owns_kv_cache:
            return
        n, p = hi - lo, max(plens)
        with self.draft_rows(state, lo, hi):
            if hasattr(self.runner, "begin_batch"):  # a multimodal draft sees the images too
                self.runner.begin_batch([state.tokens[lo + i, :m].tolist() for i, m in enumerate(plens)],
                                        state.mm_inputs)
            if p > first:  # right-padded prompts: slots past a row's prompt get garbage that is overwritten later
                at = torch.arange(first, p, device=self.device).expand(n, p - first)
                self.draft_forward(state.tokens[rows, first:p], at, self._features_before(at, rows), attn_len=p)
        self.seen[rows] = [max(m, first) for m in plens]

    @staticmethod
    def admitted_tokens(state: DecodeState, lo: int, hi: int) -> list[list[int]]:
        """Rows lo..hi-1's committed tokens (prompt and first token) on the host, one copy for the rows, for a
        strategy that keeps the sequences on the host (lookup tables, a draft with another tokenizer)."""
        rows = state.tokens[lo:hi, : max(state.lengths_host[lo:hi])].tolist()
        return [row[:n] for row, n in zip(rows, state.lengths_host[lo:hi])]

    @contextmanager
    def draft_rows(self, state: DecodeState, lo: int, hi: int) -> Iterator[None]:
        """owns_kv_cache: within the block the draft's cache holds rows lo..hi-1 only (as its rows 0..), for admit()'s
        forward (the narrow() of draft_cache()); nothing to do when they are the whole batch."""
        if (lo, hi) == (0, state.batch_size):
            yield
            return
        with self.draft_cache().narrow(lo, hi):
            yield

    def draft_cache(self) -> Any:
        """owns_kv_cache: what holds the draft's cache and narrows it (draft_rows): the runner, unless overridden."""
        return self.runner

    def step_limit(self, state: DecodeState) -> int:
        """The most this step may draft: k, capped by k_by_batch_size for the active rows and by the heuristic's K."""
        limit = self.k
        if self.k_by_batch_size:
            rows = sum(state.active_host) if state.active_host is not None else state.batch_size
            limit = min(limit, next((v for r, v in reversed(self.k_by_batch_size) if r <= rows), self.k))
        return min(limit, self.k_now) if self.k_schedule == "heuristic" else limit

    def schedule_next(self, accepted: list[int], active: list[bool]) -> None:
        """After a step (the engine calls it; accepted [B] on the host, active = the rows that drafted in it): the
        heuristic schedule's K for the next step, +2 when every active row accepted all step_k drafts, else -1
        (transformers' AssistedCandidateGenerator.update_candidate_strategy, capped at k)."""
        if self.k_schedule != "heuristic" or not any(active):
            return
        full = all(n >= self.step_k for n, on in zip(accepted, active) if on)  # all it drafted (transformers:
        self.k_now = min(self.k, self.k_now + 2) if full else max(1, self.k_now - 1)  # num_matches == candidates)

    def propose(self, state: DecodeState) -> Draft:
        limit = self.step_limit(state) if self.adaptive else self.k
        self.step_k = limit
        draft = self._propose(state, limit)
        if self.adaptive and self.drafting != "chain" and draft.chain:  # a parallel or lookup chain: cut to the limit
            cut = limit
            if self.k_schedule == "confidence" and draft.tokens.shape[1] > 1:
                # the draft's probability of each of its own picks: q, or softmax of the logits kept by _pick
                conf = self._confidence(self.last_logits, draft.tokens, draft.probs)  # [B, K]
                low = (conf < self.confidence_threshold) | ~state.active[:, None]  # [B, K]
                unsure = low.all(0)  # [K] positions where every active row is unsure
                cut = min(cut, int(torch.where(unsure, torch.arange(1, unsure.shape[0] + 1, device=unsure.device),
                                               unsure.shape[0]).min()))  # one host sync
            self.step_k = cut
            if cut < draft.tokens.shape[1]:
                draft = Draft(tokens=draft.tokens[:, :cut], probs=None if draft.probs is None else draft.probs[:, :cut])
        return draft

    def _propose(self, state: DecodeState, k: int) -> Draft:
        """The draft of one step, at most k deep for a chain drafter (parallel and lookup draft self.k; propose cuts)."""
        bsz = state.batch_size
        if self.drafting == "lookup":
            drafted = self.lookup(state)
            return drafted if isinstance(drafted, Draft) else Draft(tokens=drafted)
        attn_len = max(state.lengths_host) + self.k
        # 1) catch up: the last T committed tokens, T = the most any row has not seen (at least the pending one);
        #    rows that saw more re-feed tokens at their own positions, which rewrites identical cache entries
        unseen = [n - s for n, s in zip(state.lengths_host, self.seen)] if self.owns_kv_cache else [1] * bsz
        if self.one_extra_forward_pass:
            # the seed PR's scheme: the accepted tail first (its draft, for the bonus token's position, is dropped);
            # both forwards feed 1 token after the first step (in the first, the tail is the prompt's, already
            # ingested, so the floor makes this forward feed the bonus token, which the next rewrites identically)
            t = max(1, *(u - 1 for u in unseen))
            self._forward(state, t, attn_len, end=1)
            unseen = [1] * bsz
        t = max(1, *unseen)
        if self.fixed_catch_up and not self.one_extra_forward_pass:
            if self.tree in ("dynamic", "static"):  # the tree went to scratch slots: up to K+1 committed tokens are new
                t = self.k + 1
            elif self._past_prompts(state, 2):
                t = 2
        pre, self._pre = self._pre, None
        if pre is not None and t == 2:  # prelaunch ran this forward already, on the same inputs
            self.draft_forwards += 1
            out = pre
        else:
            out = self._forward(state, t, attn_len)  # ... then (or in the default scheme, with it) the pending token
        if self.drafting != "chain":
            out = out.full()  # a parallel drafter's logits over the target's ids (chains and trees map their picks)
        self.last_logits = out.logits  # a parallel drafter's [B, K, V]: propose's confidence cut reads it
        if self.owns_kv_cache:
            self.seen = list(state.lengths_host)
        # 2) draft: one forward gave K (parallel), or feed d_i back for the next (d_K never needs the cache), or
        #    grow a static or dynamic tree from the catch-up's distribution, one forward per depth (trees.py)
        stop = self._path_stop(state.active) if self.tree == "dynamic" and self.k_schedule == "confidence" else None
        if self.tree == "dynamic" and self.samples and not self.sampling.greedy:  # drawn from q, verified with it
            tokens, parents, probs, self.step_k = trees.expand_dynamic_sampled(
                self._feed, out, state.lengths[:, None], state.lengths_host, k, self.top_k, self.num_nodes,
                lambda logits: logits_to_probs(logits, self.sampling), self.generator, stop=stop)
            return Draft(tokens=tokens, parents=parents, probs=probs)
        if self.tree == "dynamic":
            tokens, parents = trees.expand_dynamic(self._feed, out, state.lengths[:, None], state.lengths_host, k,
                                                   self.top_k, self.num_nodes, stop=stop)
            return Draft(tokens=tokens, parents=parents)
        if self.static_tree is not None:
            tree = self.static_tree
            if self.drafting == "parallel":
                tokens = trees.parallel_static(out.logits, tree)
            else:
                tokens = trees.expand_static(self._feed, out, state.lengths[:, None], state.lengths_host, tree)
            return Draft(tokens=tokens, parents=self.static_parents.expand(bsz, -1))
        if self.drafting == "parallel":
            tokens, probs = self._pick(out.logits)  # [B, K]
            if self.tree == "topk" and self.top_k > 1:  # each depth's runners-up, under the depth before's top-1
                others = out.logits.scatter(-1, tokens[..., None], float("-inf")).topk(self.top_k - 1, dim=-1).indices
                nodes = torch.cat([tokens[..., None], others], -1).reshape(bsz, -1)  # [B, K * top_k], depth-major
                return Draft(tokens=nodes, parents=topk_parents(k, self.top_k, self.device).expand(bsz, -1))
            return Draft(tokens=tokens, probs=probs)
        tokens, probs = [], []
        for i in range(k):
            col, q = self._pick(out.logits)  # over the draft's logit columns (a reduced vocabulary's own)
            d = out.ids(col)  # [B, 1] target ids
            tokens.append(d)
            if q is not None:
                probs.append(out.on_target_ids(q, 0.0))
            if self.tree == "topk" and self.top_k > 1:  # the runners-up after the same context, as one-hot leaves
                others = out.logits.scatter(-1, col[..., None], float("-inf")).topk(self.top_k - 1, dim=-1).indices[:, 0]
                others = out.ids(others)
                tokens.append(others)
                if q is not None:
                    probs.append(torch.zeros_like(probs[-1]).expand(-1, self.top_k - 1, -1).scatter(-1, others[..., None], 1.0))
            if i + 1 < k and self.k_schedule == "confidence" and self._unsure(out.logits, col, q, state.active):
                self.step_k = i + 1
                break
            if i + 1 < k:
                pos = state.lengths[:, None] + i  # d_{i+1} sits at position lengths + i
                out = self.draft_forward(d, pos, out.hidden, attn_len)
                self.draft_forwards += 1
        tokens_t, probs_t = torch.cat(tokens, 1), torch.cat(probs, 1) if probs else None
        if self.tree == "topk" and self.top_k > 1:
            return Draft(tokens=tokens_t, probs=probs_t, parents=topk_parents(k, self.top_k, self.device).expand(bsz, -1))
        return Draft(tokens=tokens_t, probs=probs_t)

    def commit(self, state: DecodeState, verdict: Verdict, accepted: list[int], old_lengths: list[int]) -> None:
        """Hear what the target accepted. `state` is already committed; `accepted` (= verdict.accepted on the
        host) and `old_lengths` (the lengths before this step) are per row. Finished rows keep their length."""
        # the verify forward's features, kept here rather than at the next propose(): a row admitted in between
        # (continuous batching) must not get its slot's previous request's features
        self._keep_features(state, state.target_hidden, state.target_layer_hidden, state.target_positions)
        if not self.owns_kv_cache or self.drafting != "chain":
            return
        # the draft wrote d_1..d_{K-1} after the catch-up: valid up to the first rejected one, never past a row's
        # (possibly truncated) length. A hidden-state drafter wrote them from its own features, not the target's:
        # none is kept, the next catch-up rewrites them from the target's true features.
        # A static or dynamic tree was written at scratch slots, not at its positions: nothing is kept either.
        scratch = self.tree in ("dynamic", "static")
        # (the chain wrote d_1..d_{K_step - 1}: with adaptive K this step's K, not k)
        kept = (lambda n: 0) if self.pass_hidden_states_to_model or scratch else (lambda n: min(n, self.step_k - 1))
        if self.tree == "topk" and self.top_k > 1:  # the draft fed only the chain: the path's leading chain nodes
            chain = [[node == d * self.top_k for d, node in enumerate(row)] for row in verdict.path.tolist()]
            accepted = [next((d for d, on in enumerate(row[:n]) if not on), n) for row, n in zip(chain, accepted)]
        self.seen = [min(old + kept(n), new) for old, n, new in zip(old_lengths, accepted, state.lengths_host)]

    # -- helpers ---------------------------------------------------------------------------------------------
    def _forward(self, state: DecodeState, t: int, attn_len: int, end: int = 0) -> DraftOutput:
        """Draft forward over each row's committed tokens at positions [L-end-t, L-end)."""
        positions = state.lengths[:, None] + self._catch_up_offsets(t, end)
        if not self._past_prompts(state, end + t):  # else no row's positions fall below its prompt
            positions = torch.maximum(positions, self.floor)  # (one launch less in a long decode)
        self.draft_forwards += 1
        return self.draft_forward(state.tokens.gather(1, positions), positions, self._features_before(positions),
                                  attn_len)

    @staticmethod
    def _past_prompts(state: DecodeState, n: int) -> bool:
        """Whether every row's last n committed positions lie past its prompt (length - n >= prompt length)."""
        return all(length - n >= p for length, p in zip(state.lengths_host, state.prompt_lengths))

    def _catch_up_offsets(self, t: int, end: int) -> torch.Tensor:
        """[t] offsets from a row's length to the positions [L-end-t, L-end) a catch-up feeds (made once)."""
        return self._const(("catch_up", t, end), lambda: torch.arange(t, device=self.device) - end - t)

    def _const(self, key: tuple, make: Callable[[], torch.Tensor]) -> torch.Tensor:
        """A constant index tensor made once per key (never written in place by its users)."""
        hit = self._consts.get(key)
        if hit is None:
            hit = self._consts[key] = make()
        return hit

    def _feed(self, *args: Any, **kwargs: Any) -> DraftOutput:
        """draft_forward for the tree expansions (trees.py), counted."""
        self.draft_forwards += 1
        return self.draft_forward(*args, **kwargs)

    def _keep_features(self, state: DecodeState, hidden: torch.Tensor | None, layer_hidden: list[torch.Tensor] | None,
                       positions: torch.Tensor | None, rows: slice = slice(None)) -> None:
        """pass_hidden_states_to_model: store a target forward's features of rows `rows` at their positions (a
        prefill: the prompts; a verify: the pending token and the drafts, those past a row's prefix overwritten
        before read)."""
        if not self.pass_hidden_states_to_model or self.drafting == "lookup":  # a lookup reads DecodeState itself
            return
        assert positions is not None
        f = self.target_features(hidden, layer_hidden)  # [rows, T, H]
        if self.features is None:
            self.features = torch.zeros((state.batch_size, state.max_len, f.shape[-1]), device=f.device, dtype=f.dtype)
        self.features[rows].scatter_(1, positions[..., None].expand(-1, -1, f.shape[-1]), f)

    def _features_before(self, positions: torch.Tensor, rows: slice = slice(None)) -> torch.Tensor | None:
        """[rows, T, H] the target's feature at p-1 for each token position p (None unless hidden-state drafting)."""
        if not self.pass_hidden_states_to_model:
            return None
        assert self.features is not None
        before = (positions - 1).clamp(min=0)
        return self.features[rows].gather(1, before[..., None].expand(-1, -1, self.features.shape[-1]))

    def _confidence(self, logits: torch.Tensor, tokens: torch.Tensor, probs: torch.Tensor | None) -> torch.Tensor:
        """[B, N] the draft's probability of its own picks tokens [B, N]: q(d) when it sampled (probs [B, N, V]),
        else softmax(logits [B, N, V]) at d (a greedy draft's confidence in its argmax)."""
        dist = probs if probs is not None else torch.softmax(logits.float(), dim=-1)
        return dist.gather(-1, tokens[..., None])[..., 0]

    def _path_stop(self, active: torch.Tensor):
        """k_schedule=confidence, tree=dynamic: stop expanding when every active row's likeliest frontier path has a
        cumulative draft probability under the threshold (trees.expand_dynamic asks once the tree holds num_nodes;
        expand_dynamic_sampled, at T > 0, before each deeper expansion, and then goes wider)."""
        log_t = math.log(self.confidence_threshold)

        def stop(score: torch.Tensor, depth: int) -> bool:  # score [B, w]: log path probabilities of the frontier
            done = bool(((score.max(-1).values < log_t) | ~active).all())  # one host sync per depth
            if done:
                self.step_k = depth
            return done
        return stop

    def _unsure(self, logits: torch.Tensor, d: torch.Tensor, q: torch.Tensor | None, active: torch.Tensor) -> bool:
        """k_schedule=confidence, chain: whether every active row's last draft d [B, 1] is under the threshold
        (one host sync per draft forward, as in transformers' ConfidenceCriteria)."""
        low = self._confidence(logits, d, q)[:, 0] < self.confidence_threshold  # [B]
        return bool((low | ~active).all())

    def _pick(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """[B, N, V] logits -> draft tokens [B, N] and, when the strategy samples at T > 0, q [B, N, V]."""
        if self.sampling.greedy or not self.samples:
            return argmax_last(logits), None
        q = logits_to_probs(logits, self.sampling)
        return sample_from(q, exp_noise(q.shape, self.generator, q.device)), q
