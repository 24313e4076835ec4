"""Training losses, each returning one value per example: EMS's (Mao, Chu, Kurohashi) cross-lingual
token reconstruction and contrastive losses, and multilingual knowledge distillation (Reimers &
Gurevych 2020)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

# The training objectives, in the order of the weighted loss, metrics.jsonl, TensorBoard and the
# progress bar. EMSModel computes each as a per-example loss (a function of ems.losses) weighted
# by EMSConfig.<name>_weight; the trainer's metrics, logs, validation and non-finite checks follow
# this tuple, so a new objective is its name here, its loss function and its term in EMSModel.forward.
OBJECTIVES = ("xtr", "contrastive", "distill")


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


def distill_loss(student_src: Tensor, student_tgt: Tensor, teacher: Tensor) -> Tensor:
    """Multilingual knowledge distillation, Reimers & Gurevych (EMNLP 2020), Eq. 1, per pair.

    student_src, student_tgt: (B, d) the student's vectors M̂(s_i), M̂(t_i) of both sides of pair i;
    teacher: (B, d) the teacher's vector M(s_i) of its source sentence s_i (the side in the
    teacher's languages). Returns (B,) ||M(s_i) - M̂(s_i)||² + ||M(s_i) - M̂(t_i)||², squared error
    summed over dimensions; the paper's loss is its mean over the batch. (sentence-transformers'
    MSELoss also averages over the d dimensions: the same gradient direction, 1/d the scale.)
    """
    target = teacher.float()
    return (target - student_src.float()).pow(2).sum(dim=-1) + (target - student_tgt.float()).pow(2).sum(dim=-1)


DUPLICATE_NEGATIVES = ("mask", "positive", "keep")


def duplicate_mask(content_ids: Tensor, pool_ids: Tensor, offset: int = 0) -> Tensor:
    """Which in-batch candidates are translations of the same sentence as a row ("duplicates").

    content_ids: (B, 2) content ids of this batch's pairs (both sides; `data_prep.binarize`
    hashes each sentence's normalised text); pool_ids: (M, 2) those of every candidate pair,
    row i of the batch being pool row offset + i. Returns (B, M) bool, True where pair i and
    pool pair j != offset + i share a sentence on either side, in either position: (de, en=E)
    and (en=E, fr) share E, so de and fr are translations of each other and neither side of one
    is a true negative for the other.
    """
    shared = (content_ids[:, None, :, None] == pool_ids[None, :, None, :]).flatten(2).any(dim=2)
    rows = torch.arange(len(content_ids), device=content_ids.device)
    shared[rows, offset + rows] = False
    return shared


def _info_nce(scores: Tensor, labels: Tensor, duplicates: Tensor | None, duplicate_negatives: str) -> Tensor:
    """(B, M) scores, (B,) gold columns -> (B,) -log softmax(scores)[gold], with duplicates masked out of
    the denominator ("mask"), counted as further positives ("positive": the supervised-contrastive
    mean over positives, Khosla et al. 2020, Eq. 2), or left as negatives ("keep")."""
    if duplicates is None or duplicate_negatives == "keep":
        return F.cross_entropy(scores, labels, reduction="none")
    if duplicate_negatives == "mask":
        return F.cross_entropy(scores.masked_fill(duplicates, float("-inf")), labels, reduction="none")
    positives = duplicates.clone()
    positives[torch.arange(len(labels), device=labels.device), labels] = True
    log_probs = F.log_softmax(scores, dim=1)
    return -(log_probs.masked_fill(~positives, 0.0).sum(dim=1) / positives.sum(dim=1))


def _with_margin(cosines: Tensor, labels: Tensor, margin: float) -> Tensor:
    """(B, M) cosines with `margin` taken from each row's gold column (labels: (B,))."""
    if not margin:
        return cosines
    gold = F.one_hot(labels, cosines.shape[1]).to(cosines.dtype)
    return cosines - margin * gold


def _check_duplicate_negatives(duplicate_negatives: str) -> None:
    if duplicate_negatives not in DUPLICATE_NEGATIVES:
        raise ValueError(
            f"duplicate_negatives must be one of {', '.join(DUPLICATE_NEGATIVES)}, not {duplicate_negatives!r}"
        )


def contrastive_loss(
    h_u: Tensor,
    h_v: Tensor,
    temperature: float,
    duplicates: Tensor | None = None,
    duplicate_negatives: str = "mask",
    margin: float = 0.0,
) -> Tensor:
    """Symmetric in-batch InfoNCE, paper Eq. 8-11.

    h_u, h_v: (B, k) projections of the two sides; row i of each is a translation pair and
    every other row in the batch is a negative, except its duplicates: `duplicates` (B, B) from
    `duplicate_mask`, handled as `duplicate_negatives` says (see `_info_nce`; the paper's loss is "keep",
    or any handling without duplicates). Returns (B,) loss_u->v + loss_v->u over cos(h_u_i, h_v_j) / temperature,
    where the gold pair's cosine is cos - `margin` (additive margin softmax, Yang et al. 2019; 0: the paper's).
    """
    _check_duplicate_negatives(duplicate_negatives)
    scores = F.normalize(h_u.float(), dim=-1) @ F.normalize(h_v.float(), dim=-1).T
    labels = torch.arange(scores.shape[0], device=scores.device)
    scores = _with_margin(scores, labels, margin) / temperature
    return _info_nce(scores, labels, duplicates, duplicate_negatives) + _info_nce(
        scores.T, labels, duplicates, duplicate_negatives
    )


def gather_with_grad(x: Tensor) -> Tensor:
    """(b, k) on every rank -> (world_size * b, k): all ranks' rows in rank order, for the same
    b on every rank. Differentiable (torch.distributed.nn all_gather): the backward pass sums,
    over all ranks' losses, the gradient for this rank's rows. A world of one returns `x`."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        return x
    from torch.distributed.nn.functional import all_gather

    return torch.cat(all_gather(x))


def gather_rows(x: Tensor) -> tuple[Tensor, int]:
    """(b, ...) on every rank -> (all ranks' rows in rank order, this rank's first row in them),
    without gradients (content ids); a world of one returns (x, 0)."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        return x, 0
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts), dist.get_rank() * len(x)


def global_contrastive_loss(
    h_u: Tensor,
    h_v: Tensor,
    temperature: float,
    duplicates: Tensor | None = None,
    duplicate_negatives: str = "mask",
    margin: float = 0.0,
) -> Tensor:
    """`contrastive_loss` with negatives from every rank's batch.

    h_u, h_v: (B, k) this rank's projections (the same B on every rank); duplicates: (B, world_size * B)
    from `duplicate_mask` against the gathered content ids (`gather_rows`). Returns (B,) the
    symmetric InfoNCE of this rank's pairs, each scored against all world_size * B pairs of
    the global batch: the mean over ranks of the batch means is the single-process loss over
    the concatenated global batch. Gradients reach the local rows and, through the gather,
    the other ranks' rows.
    """
    import torch.distributed as dist

    _check_duplicate_negatives(duplicate_negatives)
    all_u, all_v = gather_with_grad(h_u), gather_with_grad(h_v)
    rank = dist.get_rank() if all_u is not h_u else 0
    u, v = F.normalize(h_u.float(), dim=-1), F.normalize(h_v.float(), dim=-1)
    labels = rank * len(u) + torch.arange(len(u), device=u.device)
    u_to_v = _with_margin(u @ F.normalize(all_v.float(), dim=-1).T, labels, margin) / temperature
    v_to_u = _with_margin(v @ F.normalize(all_u.float(), dim=-1).T, labels, margin) / temperature
    return _info_nce(u_to_v, labels, duplicates, duplicate_negatives) + _info_nce(
        v_to_u, labels, duplicates, duplicate_negatives
    )
