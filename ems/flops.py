"""Model FLOPs of EMS training: what a step, a pair or a run costs in real (non-pad) work.

In: an EMSConfig and the real token lengths of a batch's sentences; out: forward + backward FLOPs
(3 x forward, 2 FLOPs per multiply-add), split into the encoder's dense layers, its attention
and the training heads:

    encoder    6 * n_layers * (4 d^2 + 2 d d_ffn) * real_tokens        (qkv, out projection, FFN)
    attention  12 * n_layers * d * sum_i T_i^2                          (QK^T and AV per sentence)
    heads      6 * 2B * ((d + d_lang)^2 + (d + d_lang) V + d^2 + d d_contrastive) + 6 B^2 d_contrastive

where 2B sentences (B pairs) go through the XTR head (fc + projection onto V candidate tokens: the
whole vocabulary, or with `xtr_vocabulary: batch` the batch's distinct tokens) and the contrastive
head, and the last term is the in-batch score matrix. Embedding look-ups, norms, softmaxes and the
optimizer do no matmul work and are not counted; neither is padding. benchmarks/train_mfu.py
divides these by measured step times (MFU); the compute map (eval.compute_map) puts a run's total
on its x-axis.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ems.model import EncoderNetwork
from ems.model_config import EMSConfig


@dataclass(frozen=True)
class StepFlops:
    encoder: float
    attention: float
    heads: float

    @property
    def total(self) -> float:
        return self.encoder + self.attention + self.heads


def encoder_flops(cfg: EMSConfig, lengths: np.ndarray) -> StepFlops:
    """Forward + backward FLOPs of the encoder stack over sentences of the given real lengths."""
    lengths = np.asarray(lengths, dtype=np.float64)
    d, layers = cfg.d_model, cfg.n_layers
    dense = 6.0 * layers * (4 * d * d + 2 * d * cfg.d_ffn) * lengths.sum()
    attention = 12.0 * layers * d * (lengths**2).sum()
    return StepFlops(encoder=dense, attention=attention, heads=0.0)


def step_flops(
    cfg: EMSConfig, src_lengths: np.ndarray, tgt_lengths: np.ndarray, xtr_candidates: int | None = None
) -> StepFlops:
    """Model FLOPs of one EMS training step on pairs of these real lengths (see the module doc).
    `xtr_candidates`: the XTR softmax's size V, by default the whole vocabulary (cfg.vocab_size);
    with `xtr_vocabulary: batch` pass the batch's number of distinct tokens."""
    pairs = len(src_lengths)
    enc = encoder_flops(cfg, np.concatenate([src_lengths, tgt_lengths]))
    d, h = cfg.d_model, cfg.d_model + cfg.d_lang
    v = cfg.vocab_size if xtr_candidates is None else xtr_candidates
    per_sentence = h * h + h * v + d * d + d * cfg.d_contrastive
    heads = 6.0 * 2 * pairs * per_sentence + 6.0 * pairs * pairs * cfg.d_contrastive
    return StepFlops(encoder=enc.encoder, attention=enc.attention, heads=heads)


def encoder_parameters(cfg: EMSConfig) -> dict[str, int]:
    """Parameters of the encoder kept at inference (ems.model.EncoderNetwork, built on the meta
    device: no memory): {"embeddings": the token and position tables, "layers": everything else
    (the stack, norms, an output map), "total"}. The training heads are not counted."""
    with torch.device("meta"):
        network = EncoderNetwork(cfg)
    embeddings = network.tok_emb.weight.numel() + network.pos_emb.weight.numel()
    total = sum(p.numel() for p in network.parameters())
    return {"embeddings": embeddings, "layers": total - embeddings, "total": total}
