"""EMS training losses (Mao, Chu, Kurohashi), each returning one value per example."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def xtr_loss(logits: Tensor, targets: Tensor, pad_id: int) -> Tensor:
    """Cross-lingual token reconstruction, paper Eq. 2-6, one direction.

    logits: (B, V) predicted token scores for the translation; targets: (B, L) token ids of
    the translation, `pad_id` where padded. Returns (B,) KL(p || q) where
    p(w) = count of w in the target / number of target tokens (a repeated token counts
    every time it occurs) and q = softmax(logits).

    No dense (B, V) target is built: with n target tokens t_1..t_n,
    KL = sum_w p(w) log p(w) - sum_w p(w) log q(w) = 1/n sum_i [log p(t_i) - log q(t_i)].
    """
    log_q = F.log_softmax(logits.float(), dim=-1)
    mask = targets != pad_id
    n = mask.sum(dim=1).clamp(min=1)
    log_q_at_targets = log_q.gather(1, targets.masked_fill(~mask, 0))
    same_token = (targets.unsqueeze(2) == targets.unsqueeze(1)) & mask.unsqueeze(1)
    log_p_at_targets = torch.log(same_token.sum(dim=2).clamp(min=1) / n.unsqueeze(1))
    return ((log_p_at_targets - log_q_at_targets) * mask).sum(dim=1) / n


def contrastive_loss(h_u: Tensor, h_v: Tensor, temperature: float) -> Tensor:
    """Symmetric in-batch InfoNCE, paper Eq. 8-11.

    h_u, h_v: (B, k) projections of the two sides; row i of each is a translation pair and
    every other row in the batch is a negative. Returns (B,) loss_u->v + loss_v->u over
    cos(h_u_i, h_v_j) / temperature.
    """
    scores = F.normalize(h_u.float(), dim=-1) @ F.normalize(h_v.float(), dim=-1).T / temperature
    labels = torch.arange(scores.shape[0], device=scores.device)
    return F.cross_entropy(scores, labels, reduction="none") + F.cross_entropy(scores.T, labels, reduction="none")


def gather_with_grad(x: Tensor) -> Tensor:
    """(b, k) on every rank -> (world_size * b, k): all ranks' rows in rank order, for the same
    b on every rank. Differentiable (torch.distributed.nn all_gather): the backward pass sums,
    over all ranks' losses, the gradient for this rank's rows. A world of one returns `x`."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        return x
    from torch.distributed.nn.functional import all_gather

    return torch.cat(all_gather(x))


def global_contrastive_loss(h_u: Tensor, h_v: Tensor, temperature: float) -> Tensor:
    """`contrastive_loss` with negatives from every rank's batch.

    h_u, h_v: (B, k) this rank's projections (the same B on every rank). Returns (B,) the
    symmetric InfoNCE of this rank's pairs, each scored against all world_size * B pairs of
    the global batch: the mean over ranks of the batch means is the single-process loss over
    the concatenated global batch. Gradients reach the local rows and, through the gather,
    the other ranks' rows.
    """
    import torch.distributed as dist

    all_u, all_v = gather_with_grad(h_u), gather_with_grad(h_v)
    rank = dist.get_rank() if all_u is not h_u else 0
    u, v = F.normalize(h_u.float(), dim=-1), F.normalize(h_v.float(), dim=-1)
    labels = rank * len(u) + torch.arange(len(u), device=u.device)
    u_to_v = u @ F.normalize(all_v.float(), dim=-1).T / temperature
    v_to_u = v @ F.normalize(all_u.float(), dim=-1).T / temperature
    return F.cross_entropy(u_to_v, labels, reduction="none") + F.cross_entropy(v_to_u, labels, reduction="none")
