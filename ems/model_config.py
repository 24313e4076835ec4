"""The EMS model's typed config and its sizes: `EMSConfig` (the network's shape, the training objectives
and their weights, the attention path and the LayerNorm placement, each checked when the config is made)
and the presets `PRESETS` (`config_from_preset`). The network it describes is ems.model's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ems.losses import DUPLICATE_NEGATIVES, OBJECTIVES
from ems.text import PAD_ID, SPM_FILE, TOKENIZER_FILE

# Token positions of every preset: enough to keep >= 99% of the FLORES-200 devtest sentences of every
# trained language whole with the all-language 64k vocabulary, whose longest (Thai, Burmese, Khmer) far
# exceed EMSConfig's default of 120 (docs/results/multilingual.md, "max_len").
PRESET_MAX_LEN = 288
NORM_PLACEMENTS = ("pre", "post")  # EMSConfig.norm_placement
ATTENTION_PATHS = ("auto", "varlen", "sdpa", "matmul")  # EMSConfig.attention


@dataclass
class EMSConfig:
    vocab_size: int
    n_languages: int
    d_model: int = 1024
    n_layers: int = 6
    n_heads: int = 16
    d_ffn: int = 4096
    max_len: int = 120
    # 0: the recipes' few epochs underfit, and dropout costs CPU step time
    # (docs/results/peer.md#how-the-demos-other-settings-were-chosen); ems-paper: the paper's 0.1
    dropout: float = 0.0
    d_lang: int = 128  # XTR language embedding (d_la in the paper)
    d_contrastive: int = 128  # contrastive projection (d_cntrs)
    # Table 13's component ablations: False drops the contrastive projection h (the loss acts on u
    # itself, "- L_cntrs_mlp") or the target-language embedding of the XTR head ("- langs tok").
    # False: the contrastive loss on u, the vector retrieval scores, which screened better than the paper's h(u)
    # (docs/results/peer.md#how-the-demos-other-settings-were-chosen); ems-paper: the paper's projection
    contrastive_projection: bool = False
    xtr_language_token: bool = True
    contrastive_temperature: float = 0.1  # the contrastive softmax: cos / contrastive_temperature
    # Additive margin softmax (Yang et al. 2019, LaBSE): the gold pair's cosine minus this margin in the
    # contrastive softmax, so a translation must beat every in-batch negative by it. 0 is the paper's loss.
    contrastive_margin: float = 0.0
    xtr_weight: float = 1.0
    # The XTR softmax's candidates: "full", the whole vocabulary (paper Eq. 5); "batch", only the tokens
    # of the batch's sentences (a sampled softmax, Jean et al. 2015, with the batch as the sample): a
    # demo batch holds ~2,100 of 16k pieces, so the head's product and softmax shrink ~7x. "batch": a 32k
    # vocabulary at a 16k one's step cost (docs/results/peer.md#how-the-demos-other-settings-were-chosen);
    # ems-paper: the paper's "full"
    xtr_vocabulary: str = "batch"
    contrastive_weight: float = 1.0
    distill_weight: float = 0.0  # knowledge distillation from a teacher's vectors (ems.losses.distill_loss)
    # A linear map of the pooled vector u to this many dimensions, kept in the exported encoder (its
    # output is then d_output-dimensional): how a student of width d_model matches a teacher of
    # another dimension. Distillation trains it; XTR and contrastive act on u before it (acting on
    # the mapped vector, they fought the distillation term over its scale: docs/results/ablations.md).
    d_output: int | None = None
    # In-batch pairs that share a sentence with a row (translations of the same sentence, common in
    # English-centric data): "mask" them out of its softmax, count them as "positive"s, or "keep"
    # them as negatives (the paper's loss). Needs content ids in the batch (data_prep.binarize).
    duplicate_negatives: str = "mask"
    # "varlen": one variable-length flash attention call per layer over the packed tokens (CUDA, bf16/fp16,
    # torch >= 2.10; no attention-probability dropout: the kernel has none); "sdpa":
    # F.scaled_dot_product_attention over padded rows; "matmul": `attention_with_dropout` over padded rows;
    # "auto": varlen where it runs, else matmul on CPU when gradients are computed, sdpa otherwise. Training
    # on CPU, sdpa's flash kernel is slow at these lengths in bf16, and it has no fused kernel with dropout
    # (see attention_with_dropout); encoding (no gradients, no dropout) it is the faster one
    # (docs/results/throughput.md).
    attention: str = "auto"
    # Attention over groups of this many length-sorted rows, each padded to its own longest (0: the
    # whole batch in one layout); the same result, less padding in batches of mixed lengths (see
    # ems.packing.Packer; docs/results/throughput.md, docs/results/gpu.md). For the padded paths (sdpa,
    # matmul): varlen attention has no padding and ignores it, as does a compiled step (static shapes).
    attention_group_rows: int = 128
    # Where each layer's LayerNorms sit: "pre" (LN before the attention and the feed-forward block, a final
    # LN before pooling; GPT-2's and most recent encoders') or "post" (LN after each residual sum, as in the
    # transformer the paper cites for its encoder, Vaswani et al. 2017, and BERT; here with BERT's LN on the
    # embeddings instead of before pooling: the same parameters). The default is "post", the recipes': it
    # screened better out of domain than "pre"
    # (docs/results/peer.md#why-the-stock-trainer-led-out-of-domain-the-screen). "pre" is GPT-2's and most
    # recent encoders' layout, and that of a config.json saved before the field (ems.encoder.read_config).
    norm_placement: str = "post"
    # A LayerNorm on the embeddings (token + position) before the first layer, as BERT has, with pre-LN
    # layers; "post" has it already.
    embedding_norm: bool = False
    pad_id: int = PAD_ID

    def __post_init__(self) -> None:
        # each value of its field's type first (a config.json edited by hand: `"n_heads": false`, `"max_len":
        # null`), and the sizes that shape the tensors >= 1, before any arithmetic or tensor uses them
        for field in dataclasses.fields(self):
            wanted = self._wanted(field.type, getattr(self, field.name))
            if wanted is not None:
                raise ValueError(f"{field.name} must be {wanted}, got {getattr(self, field.name)!r:.60}")
        sizes = ("vocab_size", "n_languages", "d_model", "n_layers", "n_heads", "d_ffn", "max_len", "d_lang")
        small = [name for name in (*sizes, "d_contrastive") if getattr(self, name) < 1]
        if small:
            raise ValueError(f"{small[0]} must be >= 1, got {getattr(self, small[0])}")
        if not 0 <= self.pad_id < self.vocab_size:
            raise ValueError(
                f"pad_id must be a piece of the vocabulary (0 to {self.vocab_size - 1}), got {self.pad_id}"
            )
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.attention not in ATTENTION_PATHS:
            raise ValueError(f"attention must be one of {', '.join(ATTENTION_PATHS)}, not {self.attention!r}")
        if self.norm_placement not in NORM_PLACEMENTS:
            raise ValueError(f"norm_placement must be one of {', '.join(NORM_PLACEMENTS)}, not {self.norm_placement!r}")
        if self.embedding_norm and self.norm_placement == "post":
            raise ValueError(
                "embedding_norm is for pre-LN layers: norm_placement post normalises the embeddings already"
            )
        if self.xtr_vocabulary not in ("full", "batch"):
            raise ValueError(f"xtr_vocabulary must be 'full' or 'batch', not {self.xtr_vocabulary!r}")
        if self.duplicate_negatives not in DUPLICATE_NEGATIVES:
            raise ValueError(
                f"duplicate_negatives must be one of {', '.join(DUPLICATE_NEGATIVES)}, not {self.duplicate_negatives!r}"
            )
        weights = {f"{name}_weight": self.weight(name) for name in OBJECTIVES}
        if any(w < 0 for w in weights.values()) or not any(weights.values()):
            raise ValueError(f"the objective weights must be >= 0 and one of them > 0, got {weights}")
        if not 0 <= self.contrastive_margin < 2:
            raise ValueError(f"contrastive_margin must be in [0, 2) (a cosine margin), got {self.contrastive_margin}")
        if self.attention_group_rows < 0:
            raise ValueError(f"attention_group_rows must be >= 0 (0: no groups), got {self.attention_group_rows}")
        if self.d_output is not None and self.d_output < 1:
            raise ValueError(f"d_output must be a positive number of dimensions or null, got {self.d_output}")

    @staticmethod
    def _wanted(annotation, value) -> str | None:
        """What a field annotated `annotation` holds, when `value` is not that; None when it is (or for
        an annotation not checked). Self-contained: ems.apps.export copies this class into ems_core.py."""
        name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
        integer = isinstance(value, int) and not isinstance(value, bool)
        if name == "int":
            return None if integer else "an integer"
        if name == "int | None":
            return None if integer or value is None else "an integer or null"
        if name == "float":
            finite = integer or isinstance(value, float) and value == value and abs(value) != float("inf")
            return None if finite else "a finite number"
        if name == "bool":
            return None if isinstance(value, bool) else "true or false"
        if name == "str":
            return None if isinstance(value, str) else "a string"
        return None

    def weight(self, objective: str) -> float:
        """The weight of `objective` (one of ems.losses.OBJECTIVES) in the training loss."""
        return getattr(self, f"{objective}_weight")

    def weighted_loss(self, means: Mapping):
        """The training loss (paper Eq. 12): each objective's batch mean in `means` (a tensor or a float, by
        name) times its weight, summed; what training backpropagates and validation reports."""
        return sum(self.weight(name) * means[name] for name in OBJECTIVES)

    @property
    def d_sentence(self) -> int:
        """The dimension of the sentence vector the encoder outputs."""
        return self.d_output or self.d_model

    @classmethod
    def from_dict(cls, values: dict) -> EMSConfig:
        """The config of `values` (e.g. a config.json's object); ValueError for an unknown key."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown model config keys: {sorted(unknown)}; known: {sorted(known)}")
        return cls(**values)

    def check_vocabulary(self, vocab_size: int, n_languages: int, where: str | Path) -> None:
        """ValueError naming `where` (the model directory) unless a vocabulary of `vocab_size` pieces
        and `n_languages` languages is this model's: the model's token embeddings have one row per
        piece, and it was trained on that many languages."""
        if vocab_size != self.vocab_size:
            raise ValueError(
                f"{where}: {SPM_FILE} has {vocab_size} pieces, but the model's config has vocab_size="
                f"{self.vocab_size}: the vocabulary is not the model's"
            )
        if n_languages != self.n_languages:
            raise ValueError(
                f"{where}: {TOKENIZER_FILE} lists {n_languages} languages, but the model's config has n_languages="
                f"{self.n_languages}: the language list is not the model's"
            )


def _size(d_model: int, n_layers: int, n_heads: int) -> dict:
    """A preset's EMSConfig fields: the feed-forward layer 4 x and the language embedding 1/4 x
    d_model wide, sequences up to PRESET_MAX_LEN (the rest EMSConfig's defaults, the recipes' choices)."""
    return dict(
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        d_ffn=4 * d_model,
        d_lang=d_model // 4,
        max_len=PRESET_MAX_LEN,
    )


# The model sizes, smallest first: EMSConfig fields over its defaults (vocab_size and n_languages come
# from the tokenizer, except ems-paper's). Parameters and training FLOPs per pair of each:
# python -m benchmarks.presets_table. The demo (12 languages of short Tatoeba sentences) cuts at 64.
PRESETS: dict[str, dict] = {
    # CPU-sized model for the demo and tests: in a fixed time on CPU cores, more epochs of this size
    # score higher than fewer of a larger one (docs/results/ablations.md).
    "tiny": _size(d_model=128, n_layers=2, n_heads=4),
    # Between tiny and the specification's depth, for CPU budgets of about an hour.
    "small": _size(d_model=192, n_layers=4, n_heads=4),
    # The specification's 6 layers at a width two CPU cores can train in hours.
    "base": _size(d_model=256, n_layers=6, n_heads=4),
    # 6 layers at half the paper's width: a GPU budget of minutes to hours.
    "medium": _size(d_model=512, n_layers=6, n_heads=8),
    # The paper's model: 60k SentencePiece pieces + 62 language tokens (+ pad, unk). The paper cuts at 120
    # tokens (its footnote 17: enough with its vocabulary); PRESET_MAX_LEN keeps FLORES-200 whole here.
    # Its training settings are the paper's, not the recipes' defaults: dropout 0.1 (its training details), the
    # contrastive loss on the projection h(u) and XTR's softmax over the whole vocabulary (Eq. 5), and post-LN
    # layers (the transformer it cites for its encoder, Vaswani et al. 2017, is post-LN).
    "ems-paper": dict(
        vocab_size=60_000 + 62 + 2,
        n_languages=62,
        max_len=PRESET_MAX_LEN,
        dropout=0.1,
        contrastive_projection=True,
        xtr_vocabulary="full",
        norm_placement="post",
    ),
}


def config_from_preset(name: str, **overrides) -> EMSConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; choose from {sorted(PRESETS)}")
    return EMSConfig.from_dict({**PRESETS[name], **overrides})
