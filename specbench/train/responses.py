"""A distillation set's responses alone: written once where the target decoded them, read where its features are
wanted again.

Decoding the responses is most of what a distillation set costs (~6 minutes of an H100 for the 122 shards of the
drafters' wide set); the features are one prefill of each finished sequence. `data.export_responses=<file>` writes
the responses of the shards a run used (token ids, a few bytes a token, compressed); a later run on another machine,
with the same prompts and data settings, given `data.responses=<file>`, makes each missing shard by running the
target once over prompt + response and recording the same features (`features_of`), instead of decoding.

The file is a compressed numpy archive (read with allow_pickle=False): `meta` (JSON: the format version, the key of
the settings the responses depend on, the rows a shard holds, the shards), and per shard `s<NNNN>_tokens` (every
response's ids end to end, uint16 where the vocabulary allows) and `s<NNNN>_lengths` / `s<NNNN>_prompt_lengths`
(int32, one per sequence, in the set's order: sample by sample, each sample's prompts in shard order).

The key (`rkey` in data.load_or_generate) leaves out what the responses do not depend on (the target layers a head records), so
one file serves heads with other layers. Features from a prefill equal those recorded while decoding up to the
arithmetic's rounding (one forward over the whole sequence instead of one per step).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from specbench.errors import ConfigError

FORMAT = 1


def export(path: Path, key: str, rows: int, shards: dict[int, tuple[list[torch.Tensor], list[int]]]) -> None:
    """Write the responses of `shards` ({shard: (each sequence's tokens [N], its prompt length)}) to `path`."""
    arrays: dict[str, np.ndarray] = {}
    for s, (tokens, prompt_lengths) in sorted(shards.items()):
        responses = [t[p:] for t, p in zip(tokens, prompt_lengths)]
        flat = torch.cat(responses) if responses else torch.zeros(0, dtype=torch.long)
        dtype = np.uint16 if flat.numel() == 0 or int(flat.max()) < 2**16 else np.int32
        arrays[f"s{s:04d}_tokens"] = flat.numpy().astype(dtype)
        arrays[f"s{s:04d}_lengths"] = np.array([len(r) for r in responses], dtype=np.int32)
        arrays[f"s{s:04d}_prompt_lengths"] = np.array(prompt_lengths, dtype=np.int32)
    meta = {"format": FORMAT, "key": key, "rows": rows, "shards": sorted(shards)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(tmp, meta=np.array(json.dumps(meta)), **arrays)
    tmp.replace(path)


class Responses:
    """data.responses: the responses of a set's shards, checked against this run's settings when opened."""

    def __init__(self, path: str | Path, key: str, rows: int) -> None:
        self.path = Path(path).expanduser()
        try:
            self._archive = np.load(self.path, allow_pickle=False)
            meta = json.loads(str(self._archive["meta"]))
        except (OSError, ValueError, KeyError) as e:
            raise ConfigError(f"data.responses={str(self.path)!r} could not be read ({type(e).__name__}: {e}); "
                              "allowed: a file written by data.export_responses") from None
        if meta.get("format") != FORMAT:
            raise ConfigError(f"data.responses={str(self.path)!r} is format {meta.get('format')!r}; this specbench "
                              f"reads format {FORMAT}")
        if meta["key"] != key or meta["rows"] != rows:
            raise ConfigError(f"data.responses={str(self.path)!r} holds the responses of another set (key "
                              f"{meta['key']}, {meta['rows']} prompts a shard); this run's is key {key}, {rows} a "
                              "shard. Allowed: the file a run with the same target, prompts, data.seed, "
                              "max_new_tokens, samples, temperature, dtype and batch_size exported")
        self.shards: set[int] = set(meta["shards"])

    def __contains__(self, shard: int) -> bool:
        return shard in self.shards

    def sequences(self, shard: int, prompt_ids: list[list[int]], samples: int) -> tuple[list[list[int]], list[int]]:
        """The shard's sequences (prompt + response, in the set's order) and their prompt lengths, the prompts being
        this run's `prompt_ids` for the shard; a ConfigError if the file's prompt lengths are not theirs."""
        tokens = self._archive[f"s{shard:04d}_tokens"].astype(np.int64)
        lengths = self._archive[f"s{shard:04d}_lengths"].tolist()
        prompt_lengths = self._archive[f"s{shard:04d}_prompt_lengths"].tolist()
        expected = [len(ids) for _ in range(samples) for ids in prompt_ids]
        if prompt_lengths != expected:
            raise ConfigError(f"data.responses={str(self.path)!r}: shard {shard}'s prompts are not this run's "
                              f"(prompt lengths {prompt_lengths[:4]}... against {expected[:4]}...)")
        ends = np.cumsum(lengths)
        responses = [tokens[end - n : end].tolist() for n, end in zip(lengths, ends)]
        return [prompt_ids[j % len(prompt_ids)] + r for j, r in enumerate(responses)], prompt_lengths

