"""Int4 weights for torch's CPU int4 product (`_weight_int4pack_mm_for_cpu`): asymmetric, groups of `gs` along the
inner size, bf16 scales and zeros. Shared by intel-run3/int8_products.py and intel-run4/int4_head.py."""
import torch


def int4(w: torch.Tensor, gs: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(packed weight, scales and zeros, the dequantized weight's relative error) of `w` [N, K]."""
    n, k = w.shape
    wg = w.float().view(n, k // gs, gs)
    lo, hi = wg.amin(-1), wg.amax(-1)
    scale = (hi - lo).clamp_min(1e-6) / 15
    q = torch.clamp(torch.round((wg - lo[..., None]) / scale[..., None]), 0, 15).to(torch.int32).view(n, k)
    sz = torch.stack([scale, lo + scale * 8], -1).transpose(0, 1).contiguous().bfloat16()
    deq = ((q.view(n, k // gs, gs).float() - 8) * scale[..., None] + (lo + scale * 8)[..., None]).view(n, k)
    return torch._convert_weight_to_int4pack_for_cpu(q, 1), sz, float((deq - w.float()).norm() / w.float().norm())
