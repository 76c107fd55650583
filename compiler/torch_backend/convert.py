"""CPU torch tensors <-> numpy arrays without copies (bf16 through its 16-bit storage)."""
from __future__ import annotations

import ml_dtypes
import numpy as np


def to_numpy(t) -> np.ndarray:
    """A numpy view of a CPU tensor's memory (shared, not copied; strides kept)."""
    import torch
    if t.requires_grad:   # parameters, read under no_grad: the same memory, minus autograd's view
        t = t.detach()
    if t.dtype == torch.bfloat16:   # numpy has no bf16: reinterpret the same bytes
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def from_numpy(a: np.ndarray):
    """A torch tensor over `a`'s memory (shared, not copied)."""
    import torch
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)
