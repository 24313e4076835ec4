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
divides these by measured step times (MFU); the compute map (ems.apps.studies.compute_map) puts a run's total
on its x-axis.

`flops_per_pair` averages a step's FLOPs per pair over random batches of a corpus's shards
(`sample_batches`, `batch_tensors`): what the presets table, the GPU acceptance run and the compute map count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ems.model import EncoderNetwork
from ems.model_config import EMSConfig
from ems.shards import PairShards
from ems.text import PAD_ID


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


# --- FLOPs per pair on a corpus ------------------------------------------------------------------


def sample_batches(shards: PairShards, batch_size: int, n: int, seed: int = 0) -> list[np.ndarray]:
    """`n` random batches (pair indices) of `batch_size` pairs."""
    rng = np.random.default_rng(seed)
    return [rng.choice(len(shards), size=batch_size, replace=False) for _ in range(n)]


def batch_tensors(shards: PairShards, pairs: np.ndarray, max_len: int) -> dict[str, torch.Tensor]:
    """The training batch of these pairs: both sides cut at max_len and padded, with language ids."""
    out = {}
    for side, name in ((0, "src"), (1, "tgt")):
        seqs = [shards.sentence(2 * int(i) + side)[:max_len] for i in pairs]
        ids = torch.full((len(seqs), max(len(s) for s in seqs)), PAD_ID, dtype=torch.long)
        for row, seq in enumerate(seqs):
            ids[row, : len(seq)] = torch.from_numpy(seq.astype(np.int64))
        out[name] = ids
        out[f"{name}_lang"] = torch.from_numpy(shards.langs[pairs, side].astype(np.int64))
    return out


def flops_per_pair(cfg: EMSConfig, shards: PairShards, batches: list[np.ndarray], batch_vocabulary: bool) -> float:
    """Mean training FLOPs per pair of `cfg` over `batches` of the shards (step_flops: real tokens only, each
    sentence cut at cfg.max_len; with `batch_vocabulary` the XTR softmax's size is each batch's number of
    distinct tokens), so they follow the corpus's sentence lengths."""
    per_pair = []
    for pairs in batches:
        batch = batch_tensors(shards, pairs, cfg.max_len)
        lengths = [(batch[side] != PAD_ID).sum(dim=1).numpy() for side in ("src", "tgt")]
        tokens = torch.cat([batch["src"].flatten(), batch["tgt"].flatten()])
        candidates = int(torch.unique(tokens).numel() - 1) if batch_vocabulary else None  # less the pad id
        per_pair.append(step_flops(cfg, *lengths, xtr_candidates=candidates).total / len(pairs))
    return float(np.mean(per_pair))
