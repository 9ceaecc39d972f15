"""Per-token phi and P(next token) in torch, reduced on the logits' device.

torch is imported inside the functions, so importing this module is cheap.
Logits are turned into float32 one chunk of positions at a time (two reusable
buffers) and reduced with torch's float32 sums (cascade sums on CPU, tree
reductions on GPU: ~1e-7 relative); the log and division are done in float64.
Entropy uses the same stable form as the numpy path:
H = log(s) - sum(e * (x - m)) / s with m = max(x), e = exp(x - m), s = sum(e).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: Default number of positions (per sequence) reduced at once.
DEFAULT_CHUNK_SIZE = 32


def _chunk_stats(chunk: torch.Tensor, tokens: torch.Tensor | None, bufs: list):
    """Entropy and log P(token) (float64; the latter None without tokens) of logits [..., V].

    Works in two reusable float32 buffers (`bufs`, grown as needed) of the chunk's size.
    """
    import torch  # lazy: torch only where the fast path is asked for (the training commands)

    numel = chunk.numel()
    if not bufs or bufs[0].numel() < numel:
        bufs[:] = [torch.empty(numel, dtype=torch.float32, device=chunk.device) for _ in "be"]
    b = bufs[0][:numel].view(chunk.shape)
    e = bufs[1][:numel].view(chunk.shape)
    m = chunk.amax(dim=-1, keepdim=True).to(torch.float32)
    torch.sub(chunk, m, out=b)  # x - m, computed in float32
    torch.exp(b, out=e)
    s = e.sum(dim=-1).double()
    log_s = s.log()
    logp = None
    if tokens is not None:
        logp = b.gather(-1, tokens.unsqueeze(-1)).squeeze(-1).double() - log_s
    d = e.mul_(b).sum(dim=-1).double()
    # exp(-inf) * -inf is NaN: redo rows with masked (-inf) entries, which contribute 0.
    bad = torch.isnan(d) & ~torch.isnan(s)
    if bool(bad.any()):
        torch.exp(b, out=e)
        masked = torch.where(e > 0, e * b, torch.zeros_like(e)).sum(dim=-1).double()
        d = torch.where(bad, masked, d)
    h = (log_s - d / s).clamp_min(0.0)
    return h, logp


def token_stats_torch(
    logits: torch.Tensor, next_tokens: torch.Tensor, chunk_size: int = DEFAULT_CHUNK_SIZE
) -> tuple[torch.Tensor, torch.Tensor]:
    """(phi [B, T], p_next [B, T]) as float32 on the logits' device.

    `logits` is [B, T, V] (any float dtype); `next_tokens[b, k]` is the token that
    follows position k, so p_next[b, k] = softmax(logits[b, k])[next_tokens[b, k]].
    Positions are processed `chunk_size` at a time in two float32 buffers of
    [B, chunk_size, V]; no float32 copy of all the logits is made.
    """
    import torch  # lazy: torch only where the fast path is asked for (the training commands)

    if logits.dim() != 3:
        raise ValueError(f"logits must be [B, T, V], got shape {tuple(logits.shape)}")
    bsz, t, v = logits.shape
    if tuple(next_tokens.shape) != (bsz, t):
        raise ValueError(f"next_tokens must be [{bsz}, {t}], got {tuple(next_tokens.shape)}")
    if chunk_size < 1:
        raise ValueError("chunk_size must be positive")
    if v < 2:
        raise ValueError("vocabulary must have at least 2 entries")
    tokens = next_tokens.to(device=logits.device, dtype=torch.long)
    phi = torch.empty((bsz, t), dtype=torch.float32, device=logits.device)
    p_next = torch.empty((bsz, t), dtype=torch.float32, device=logits.device)
    inv_log_v = 1.0 / math.log(v)
    bufs: list = []
    with torch.no_grad():
        for start in range(0, t, chunk_size):
            stop = min(start + chunk_size, t)
            h, logp = _chunk_stats(logits[:, start:stop], tokens[:, start:stop], bufs)
            phi[:, start:stop] = (1.0 - h * inv_log_v).clamp(0.0, 1.0).to(torch.float32)
            p_next[:, start:stop] = logp.exp().to(torch.float32)
    return phi, p_next


def entropy_torch(logits: torch.Tensor, chunk_size: int = DEFAULT_CHUNK_SIZE) -> torch.Tensor:
    """Entropy in nats (float64) of softmax over the last axis of [..., V] logits."""
    import torch  # lazy: torch only where the fast path is asked for (the training commands)

    v = logits.shape[-1]
    rows = logits.reshape(-1, v)
    out = torch.empty(rows.shape[0], dtype=torch.float64, device=logits.device)
    bufs: list = []
    with torch.no_grad():
        for start in range(0, rows.shape[0], chunk_size):
            out[start : start + chunk_size], _ = _chunk_stats(
                rows[start : start + chunk_size], None, bufs
            )
    return out.reshape(logits.shape[:-1])


def phi_from_logits_torch(logits, chunk_size: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(phi, entropy) as float64 numpy arrays from [T, V] logits (numpy array or tensor)."""
    import torch  # lazy: torch only where the fast path is asked for (the training commands)

    x = torch.from_numpy(np.asarray(logits)) if not isinstance(logits, torch.Tensor) else logits
    h = entropy_torch(x, chunk_size=chunk_size).cpu().numpy()
    v = x.shape[-1]
    phi = np.clip(1.0 - h / math.log(v), 0.0, 1.0)
    return phi, h
