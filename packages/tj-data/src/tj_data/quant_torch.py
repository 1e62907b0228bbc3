"""Decode quantised tensors with torch, on whatever device they live (`GraphBatch.dequantize`).

The torch half of quantisation, apart from `tj_data.quant` so that the store side (schema,
writer, statistics, `quantize_store`) never imports torch.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tj_data.quant import QuantParams

__all__ = ["dequantize_tensor"]


def dequantize_tensor(t: torch.Tensor, params: QuantParams, shape: Sequence[int]) -> torch.Tensor:
    """Decode a quantised tensor [rows, *shape] to float32 on its own device."""
    x = t.to(torch.float32)
    if params.kind == "float16" and not params.scale:
        return x
    scale = torch.tensor(params.scale, dtype=torch.float32, device=t.device)
    zp = torch.tensor(params.zero_point, dtype=torch.float32, device=t.device)
    if scale.numel() > 1:
        scale, zp = scale.reshape(tuple(shape)), zp.reshape(tuple(shape))
    return (x - zp) * scale
