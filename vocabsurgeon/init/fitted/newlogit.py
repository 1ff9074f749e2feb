"""The new-logit objective of the convex fits, in chunks of positions: its value and gradient without a
(positions x new tokens) matrix.

Both convex fits (the causal output rows, `causal.fit_output_rows`; the masked-LM head, `mlm.fit_head_rows`)
minimize, with s = x . W^T + b the new logits at each position (x: the output layer's input),

    sum_i w_i log(1 + sum_j exp(s_ij - log Z_i))  -  sum_m q_m s[pos_m, tok_m]  (+ an L2 term),

the KL(p_old || p_new) where the new tokens only add mass, less the mass q put on a word's new token where
it follows. The first term's gradient in s_i is w_i times the new tokens' probabilities under the softmax over
[log Z_i, s_i], so a chunk of positions gives its share of the value and of the gradient (G^T x, (k, hidden))
from one (rows, k) matrix, freed before the next chunk (`added_mass`). The second term is linear in (W, b):
its coefficients are summed once (`word_evidence`). Autograd over the whole product kept several (P, k)
matrices alive instead, which grows with positions x new rows (bench/RESULTS.md, "The
output fit's memory").
"""

from __future__ import annotations

import functools

# The (rows, k) matrix of one chunk of positions, at most (bytes): the objective's working memory beyond its
# inputs, whatever the number of positions (2,097 positions a chunk at 8,000 new rows in float64).
CHUNK_BYTES = 2**27


def chunk_rows(k: int, itemsize: int, budget: int | None = None) -> int:
    """Positions per chunk: as many as keep a (rows, k) matrix of `itemsize`-byte numbers within `budget` bytes
    (None: CHUNK_BYTES), at least 1.

        >>> chunk_rows(8000, 8)  # float64 logits of 8,000 new tokens: 2,097 positions in 128 MiB
        2097
        >>> chunk_rows(8000, 4, budget=2**20)
        32
    """
    return max(1, (CHUNK_BYTES if budget is None else budget) // max(1, k * itemsize))


def added_mass(x, logz, W, b=0.0, weight=None, budget: int | None = None):
    """sum_i w_i log(1 + sum_j exp(s_ij - logz_i)), s = x . W^T + b, as a scalar tensor whose backward gives
    its gradient in W (and in b where b is a tensor that requires it), computed `chunk_rows` positions at a time.

    Args:
        x: (P, hidden) the output layer's input at each position, in W's dtype and on its device.
        logz: (P,) the old log partition function.
        W: (k, hidden) the new rows.
        b: the new logits' bias: a number, a 0-d tensor or one per new row (k,).
        weight: w_i: None (all 1), a number, or one per position (P,).
        budget: bytes of the (rows, k) matrix of one chunk (`chunk_rows`; None: CHUNK_BYTES).

    Example:
        >>> import torch
        >>> x, W = torch.ones(3, 2, dtype=torch.float64), torch.zeros(1, 2, dtype=torch.float64, requires_grad=True)
        >>> loss = added_mass(x, torch.zeros(3, dtype=torch.float64), W)  # each position: log(1 + 1)
        >>> round(loss.item(), 6), loss.backward(), W.grad.tolist()  # d/ds = 1/2 at each of 3 positions
        (2.079442, None, [[1.5, 1.5]])
    """
    import torch

    grad = torch.is_grad_enabled() and (W.requires_grad or (torch.is_tensor(b) and b.requires_grad))
    return _function().apply(W, b, x, logz, weight, chunk_rows(W.shape[0], W.element_size(), budget), grad)


@functools.cache
def _function():
    """The autograd function of `added_mass` (built on first use: the package imports torch lazily)."""
    import torch

    from ...kl import kl_added_mass

    class AddedMass(torch.autograd.Function):
        @staticmethod
        def forward(ctx, W, b, x, logz, weight, rows: int, grad: bool):
            k = W.shape[0]
            value = torch.zeros((), dtype=W.dtype, device=W.device)
            gW = torch.zeros_like(W) if grad else None
            gs = torch.zeros(k, dtype=W.dtype, device=W.device) if grad else None  # (k,) d/db
            per_position = torch.is_tensor(weight) and weight.dim() == 1
            for start in range(0, x.shape[0], rows):
                xc = x[start:start + rows]  # (c, hidden)
                s = xc @ W.T  # (c, k) the chunk's new logits; the one large matrix
                if torch.is_tensor(b) or b:
                    s += b
                top = s.amax(1, keepdim=True)  # (c, 1)
                s -= top
                s.exp_()  # exp(s - top)
                total = s.sum(1)  # (c,) >= 1
                excess = top[:, 0] + total.log() - logz[start:start + rows]  # log(sum_j exp s_j) - log Z_old
                w = weight[start:start + rows] if per_position else weight
                kl = kl_added_mass(excess)
                value += (kl * w).sum() if w is not None else kl.sum()
                if grad:
                    # d/ds_ij = w_i sigmoid(excess_i) softmax(s_i)_j: the new token's share of [Z_old, exp s_i]
                    coef = torch.sigmoid(excess) / total
                    s *= (coef * w if w is not None else coef)[:, None]
                    gW.addmm_(s.T, xc)  # (k, hidden)
                    gs += s.sum(0)
                del s
            if grad:
                gb = (gs.sum() if b.dim() == 0 else gs) if torch.is_tensor(b) else None
                ctx.save_for_backward(gW, gb)
            return value

        @staticmethod
        def backward(ctx, g):
            gW, gb = ctx.saved_tensors
            return g * gW, (g * gb if gb is not None else None), None, None, None, None, None

    return AddedMass


def word_evidence(x, q_pos, q_tok, q, k: int, budget: int | None = None):
    """The linear term's coefficients: sum_m q_m s[pos_m, tok_m] = (W * A).sum() + (b * c).sum() for
    (A (k, hidden): row j sums q_m x[pos_m] over the m with tok_m = j, c (k,): their q_m summed).
    Summed in chunks of `q`, as many as keep a (rows, hidden) matrix within `budget`."""
    import torch

    A = torch.zeros((k, x.shape[1]), dtype=x.dtype, device=x.device)
    c = torch.zeros(k, dtype=x.dtype, device=x.device)
    c.index_add_(0, q_tok, q)
    rows = chunk_rows(x.shape[1], x.element_size(), budget)
    for start in range(0, q.shape[0], rows):
        part = slice(start, start + rows)
        A.index_add_(0, q_tok[part], q[part, None] * x[q_pos[part]])
    return A, c
