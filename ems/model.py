"""The EMS dual transformer: one encoder shared by both sides of a parallel pair.

`EncoderNetwork` (token ids -> mean-pooled sentence vector u, optionally mapped to `d_output`
dimensions) is what inference keeps; `XTRHead` and `ContrastiveHead` exist only for training and
are dropped at export. A third objective, multilingual knowledge distillation (Reimers & Gurevych
2020, `ems.losses.distill_loss`), needs no head: it pulls the encoder's output (u, or its d_output
map) of both sides towards a teacher's vector; XTR and contrastive act on u.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from torch import Tensor, nn

from ems.losses import (
    DUPLICATE_NEGATIVES,
    OBJECTIVES,
    contrastive_loss,
    distill_loss,
    duplicate_mask,
    gather_rows,
    global_contrastive_loss,
    xtr_loss,
)
from ems.packing import BatchVocabulary, Layout, Packer, Packing
from ems.text import PAD_ID, SPM_FILE, TOKENIZER_FILE

# Token positions of every preset: >= 99% of the FLORES-200 devtest sentences of every language of the
# all-language corpus (configs/data/multilingual.yaml) whole with its 64k vocabulary. Thai's 99th
# percentile, 280 tokens, is the longest (Burmese 260, Khmer 210; 107-126 for the others; measured with
# benchmarks/flores_lengths.py); EMSConfig's default of 120 cut 2.5% of them on average, up to 45% (Thai).
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
    dropout: float = 0.1
    d_lang: int = 128  # XTR language embedding (d_la in the paper)
    d_contrastive: int = 128  # contrastive projection (d_cntrs)
    # Table 13's component ablations: False drops the contrastive projection h (the loss acts on u
    # itself, "- L_cntrs_mlp") or the target-language embedding of the XTR head ("- langs tok").
    contrastive_projection: bool = True
    xtr_language_token: bool = True
    temperature: float = 0.1
    # Additive margin softmax (Yang et al. 2019, LaBSE): the gold pair's cosine minus this margin in the
    # contrastive softmax, so a translation must beat every in-batch negative by it. 0 is the paper's loss.
    contrastive_margin: float = 0.0
    xtr_weight: float = 1.0
    # The XTR softmax's candidates: "full", the whole vocabulary (paper Eq. 5); "batch", only the tokens
    # of the batch's sentences (a sampled softmax, Jean et al. 2015, with the batch as the sample): a
    # demo batch holds ~2,100 of 16k pieces, so the head's product and softmax shrink ~7x.
    xtr_vocabulary: str = "full"
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
    # (see attention_with_dropout); encoding (no gradients, no dropout) it is the faster one (measured:
    # docs/results/throughput.md).
    attention: str = "auto"
    # Attention over groups of this many length-sorted rows, each padded to its own longest (0: the
    # whole batch in one layout); the same result, less padding in batches of mixed lengths (see
    # ems.packing.Packer). For the padded paths (sdpa, matmul): varlen attention has no padding and
    # ignores it, as does a compiled step (static shapes).
    attention_group_rows: int = 0
    # Where each layer's LayerNorms sit: "pre" (LN before the attention and the feed-forward block, a final
    # LN before pooling; GPT-2's and most recent encoders') or "post" (LN after each residual sum, as in the
    # transformer the paper cites for its encoder, Vaswani et al. 2017, and BERT; here with BERT's LN on the
    # embeddings instead of before pooling: the same parameters). The default stays "pre" because models
    # saved before the option have no norm_placement in their config.json; the recipes train "post"
    # (the out-of-domain screen: docs/results/peer.md).
    norm_placement: str = "pre"
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
        """The config of `values` (e.g. a config.json's object); ValueError for an unknown key. Older
        versions saved global_negatives here; it is dropped: a training setting (TrainConfig's), not the model's."""
        values = {key: value for key, value in values.items() if key != "global_negatives"}
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


# The model sizes, smallest first: EMSConfig fields over its defaults (vocab_size and n_languages come
# from the tokenizer, except ems-paper's). Parameters and training FLOPs per pair of each:
# python -m benchmarks.presets_table. The demo (12 languages of short Tatoeba sentences) cuts at 64.
PRESETS: dict[str, dict] = {
    # CPU-sized model for the demo and tests: in a fixed time on CPU cores, more epochs of this size beat
    # fewer of a larger one (measured: docs/results/ablations.md).
    "tiny": dict(
        d_model=128,
        n_layers=2,
        n_heads=4,
        d_ffn=512,
        d_lang=32,
        dropout=0.1,
        max_len=PRESET_MAX_LEN,
        attention_group_rows=128,
    ),
    # Between tiny and the specification's depth, for CPU budgets of about an hour.
    "small": dict(
        d_model=192,
        n_layers=4,
        n_heads=4,
        d_ffn=768,
        d_lang=48,
        dropout=0.1,
        max_len=PRESET_MAX_LEN,
        attention_group_rows=128,
    ),
    # The specification's 6 layers at a width two CPU cores can train in hours.
    "base": dict(
        d_model=256,
        n_layers=6,
        n_heads=4,
        d_ffn=1024,
        d_lang=64,
        dropout=0.1,
        max_len=PRESET_MAX_LEN,
        attention_group_rows=128,
    ),
    # 6 layers at half the paper's width: a GPU budget of minutes to hours. Attention groups: a step on
    # 1024 random pairs 1.55x faster on an H200 (docs/results/gpu.md).
    "medium": dict(
        d_model=512,
        n_layers=6,
        n_heads=8,
        d_ffn=2048,
        d_lang=128,
        dropout=0.1,
        max_len=PRESET_MAX_LEN,
        attention_group_rows=128,
    ),
    # The paper's model: 60k SentencePiece pieces + 62 language tokens (+ pad, unk). The paper cuts at 120
    # tokens (its footnote 17: enough with its vocabulary); PRESET_MAX_LEN keeps FLORES-200 whole here.
    "ems-paper": dict(vocab_size=60_000 + 62 + 2, n_languages=62, max_len=PRESET_MAX_LEN),
}


def config_from_preset(name: str, **overrides) -> EMSConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; choose from {sorted(PRESETS)}")
    return EMSConfig.from_dict({**PRESETS[name], **overrides})


def check_tensor_shapes(
    expected: Mapping[str, tuple[int, ...]], found: Mapping[str, tuple[int, ...]], source: str, model: str = "the model"
) -> None:
    """ValueError, one line naming `source` (the weights file), unless `found` has exactly the tensor
    names and shapes of `expected` (those of `model`): the first missing, unexpected or mismatching
    tensor is named, a mismatch with both shapes."""
    missing = [name for name in expected if name not in found]
    if missing:
        raise ValueError(
            f"{source} lacks tensor {missing[0]} {tuple(expected[missing[0]])} of {model} "
            f"({len(missing)} missing in all): the weights are not this model's"
        )
    unexpected = [name for name in found if name not in expected]
    if unexpected:
        raise ValueError(
            f"{source} holds tensor {unexpected[0]} {tuple(found[unexpected[0]])}, which {model} has not "
            f"({len(unexpected)} unexpected in all): the weights are not this model's"
        )
    for name, shape in expected.items():
        if tuple(found[name]) != tuple(shape):
            raise ValueError(
                f"{source}: tensor {name} is {tuple(found[name])}, but {model} expects {tuple(shape)}: "
                "the weights belong to a model of another size"
            )


def weight_shapes(weights_file: str | Path) -> dict[str, tuple[int, ...]]:
    """{tensor name: shape} of the safetensors file `weights_file`, read from its header alone (no
    tensor is loaded); ValueError for a file that is no safetensors file."""
    try:
        with safe_open(str(weights_file), framework="pt") as weights:
            return {name: tuple(weights.get_slice(name).get_shape()) for name in weights.keys()}
    except SafetensorError as error:
        raise ValueError(f"{weights_file}: not a safetensors file ({' '.join(str(error).split())})") from None


def encoder_shapes(cfg: EMSConfig) -> dict[str, tuple[int, ...]]:
    """{tensor name: shape} of the EncoderNetwork of `cfg` (built on the meta device: no memory)."""
    with torch.device("meta"):
        return {name: tuple(tensor.shape) for name, tensor in EncoderNetwork(cfg).state_dict().items()}


def load_weights(module: nn.Module, weights_file: str | Path, model: str = "the model") -> None:
    """Load the safetensors file `weights_file` into `module`, its tensor names and shapes checked
    first (check_tensor_shapes: one line naming the file and the first tensor that differs, never
    torch's list of every mismatch); ValueError also for a file that is no safetensors file."""
    try:
        state = load_file(str(weights_file))
    except SafetensorError as error:
        raise ValueError(f"{weights_file}: not a safetensors file ({' '.join(str(error).split())})") from None
    expected = {name: tuple(tensor.shape) for name, tensor in module.state_dict().items()}
    check_tensor_shapes(
        expected, {name: tuple(tensor.shape) for name, tensor in state.items()}, str(weights_file), model
    )
    module.load_state_dict(state)


def attention_with_dropout(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, dropout: float) -> Tensor:
    """dropout(softmax(q k^T / sqrt(d_head) + bias)) v for (B, H, L, d_head) q, k, v and a (B, 1, 1, L) bias.

    What F.scaled_dot_product_attention computes with dropout_p; on CPU it has no fused kernel
    with dropout and its fallback (scaling q and k separately, a mask check, float copies) takes
    about twice as long, forward + backward, as these four ops.
    """
    scores = torch.matmul(q, k.transpose(-2, -1)).mul_(q.shape[-1] ** -0.5).add_(bias.to(q.dtype))
    return torch.matmul(F.dropout(scores.softmax(dim=-1), dropout), v)


def varlen_attention_available() -> bool:
    """Whether torch has variable-length (flash) attention, torch.nn.attention.varlen (torch >= 2.10, CUDA)."""
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401
    except ImportError:
        return False
    return True


def attention_path(setting: str, device: torch.device, dtype: torch.dtype) -> str:
    """The attention computation of EMSConfig.attention `setting` for packed states on `device` in `dtype`:
    "varlen" (one variable-length flash attention call over the packed tokens), "matmul"
    (`attention_with_dropout` over padded rows) or "sdpa" (F.scaled_dot_product_attention over padded rows).
    "auto": varlen on CUDA in bf16/fp16 where torch has it; on CPU with gradients matmul; else sdpa."""
    if setting == "auto":
        if device.type == "cuda" and dtype in (torch.bfloat16, torch.float16) and varlen_attention_available():
            return "varlen"
        return "matmul" if device.type == "cpu" and torch.is_grad_enabled() else "sdpa"
    return setting


class EncoderLayer(nn.Module):
    """Transformer layer on packed token states, LayerNorm before each block or after each residual sum
    (EMSConfig.norm_placement); attention per `attention_path`, over the whole batch's padded layout, its
    length-sorted groups' layouts (Packer's group_rows) or, varlen, the packed tokens themselves."""

    def __init__(self, cfg: EMSConfig):
        super().__init__()
        self.post_norm = cfg.norm_placement == "post"
        self.n_heads = cfg.n_heads
        self.dropout = cfg.dropout
        self.attention = cfg.attention
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.ffn = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ffn), nn.GELU(), nn.Linear(cfg.d_ffn, cfg.d_model))
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor, packing: Packing) -> Tensor:
        """x: (T, d) states of the tokens of `packing` (its filler tokens included)."""
        qkv = self.qkv(x if self.post_norm else self.norm1(x))
        path = attention_path(self.attention, qkv.device, qkv.dtype)
        if path == "varlen":
            attn = self.attend_varlen(qkv, packing)
        else:
            real = qkv[: packing.n_real]
            if packing.groups:
                attn = torch.cat([self.attend(real.index_select(0, g.tokens), g.layout, path) for g in packing.groups])
                attn = attn.index_select(0, packing.ungroup)
            else:
                attn = self.attend(real, packing.layout, path)
            if packing.fill:
                attn = torch.cat([attn, attn.new_zeros(packing.fill, attn.shape[1])])
        if self.post_norm:
            x = self.norm1(x + self.drop(self.proj(attn)))
            return self.norm2(x + self.drop(self.ffn(x)))
        x = x + self.drop(self.proj(attn))
        return x + self.drop(self.ffn(self.norm2(x)))

    def attend(self, qkv: Tensor, layout: Layout, path: str) -> Tensor:
        """(n, 3d) packed queries, keys and values -> (n, d) packed attention outputs, over `layout`."""
        b, t = layout.rows, layout.width
        d = qkv.shape[-1] // 3
        q, k, v = layout.unpack(qkv).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        dropout = self.dropout if self.training else 0.0
        if path == "matmul":
            attn = attention_with_dropout(q, k, v, layout.bias, dropout)
        else:
            attn = F.scaled_dot_product_attention(q, k, v, attn_mask=layout.mask, dropout_p=dropout)
        return layout.pack(attn.transpose(1, 2).reshape(b, t, d))

    def attend_varlen(self, qkv: Tensor, packing: Packing) -> Tensor:
        """(T, 3d) packed queries, keys and values -> (T, d): one variable-length attention call over all
        the batch's segments (torch's flash varlen kernel; it has no attention-probability dropout)."""
        from torch.nn.attention.varlen import varlen_attn

        d = qkv.shape[-1] // 3
        q, k, v = qkv.view(-1, 3, self.n_heads, d // self.n_heads).unbind(1)
        cu, longest = packing.cu_seqlens, packing.max_seqlen
        return varlen_attn(q, k, v, cu, cu, longest, longest).reshape(-1, d)


class EncoderNetwork(nn.Module):
    """The sentence encoder's network (ems.encoder.EMSEncoder wraps it with the tokenizer for text):
    (B, L) token ids, `pad_id` where padded -> (B, d_model) mean of the non-pad token states u
    (`pool`), mapped linearly to (B, d_output) when the config has d_output (`project`)."""

    def __init__(self, cfg: EMSConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.pos_emb = nn.Embedding(cfg.max_len, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.embedding_norm = nn.LayerNorm(cfg.d_model) if cfg.embedding_norm else None
        self.output_projection = nn.Linear(cfg.d_model, cfg.d_output) if cfg.d_output else None

    def forward(self, tokens: Tensor, packing: Packing | None = None) -> Tensor:
        return self.project(self.pool(tokens, packing))

    def project(self, pooled: Tensor) -> Tensor:
        """(B, d_model) pooled vectors -> the encoder's output vectors (B, d_sentence)."""
        return pooled if self.output_projection is None else self.output_projection(pooled)

    def packer(self, varlen: bool = False, static_shapes: bool = False) -> Packer:
        """The Packer of this network's batches: its pad id, max_len and attention groups, none where attention
        runs varlen (it needs none) or the shapes are static (a compiled step)."""
        groups = 0 if varlen or static_shapes else self.cfg.attention_group_rows
        return Packer(self.cfg.pad_id, self.cfg.max_len, groups, static_shapes)

    def pool(self, tokens: Tensor, packing: Packing | None = None) -> Tensor:
        """(B, L) token ids and their `packing` (None: packed here, reading `tokens` on the host) -> (B, d_model)
        mean of the final (LayerNorm'd) non-pad token states; with post-LN layers, `norm` normalises the
        embeddings instead (BERT's embedding LayerNorm), and with `embedding_norm` an extra LayerNorm does."""
        if packing is None:
            packer = self.packer()
            packing = packer(packer.pad_width(tokens.cpu().numpy())).to(tokens.device)
        x = self.tok_emb(packing.ids) + self.pos_emb(packing.positions)
        post_norm = self.cfg.norm_placement == "post"
        if self.embedding_norm is not None or post_norm:
            x = (self.norm if post_norm else self.embedding_norm)(x)
        x = self.drop(x)
        for layer in self.layers:
            x = layer(x, packing)
        return packing.mean(x if post_norm else self.norm(x))


class XTRHead(nn.Module):
    """(u: (B, d), target language index: (B,)[, columns: (U,) token ids]) -> (B, vocab) logits of the
    translation's tokens, or (B, U) those of the given tokens only.

    q = softmax(W_emb · swish(W_fc [lang_emb(l'); u])), paper Eq. 4-5; without
    `xtr_language_token`, q = softmax(W_emb · swish(W_fc u)) (the target language is not given).
    """

    def __init__(self, cfg: EMSConfig):
        super().__init__()
        d_lang = cfg.d_lang if cfg.xtr_language_token else 0
        self.lang_emb = nn.Embedding(cfg.n_languages, d_lang) if d_lang else None
        self.fc = nn.Linear(d_lang + cfg.d_model, d_lang + cfg.d_model)
        self.out = nn.Linear(d_lang + cfg.d_model, cfg.vocab_size)

    def forward(self, u: Tensor, target_lang: Tensor, columns: Tensor | None = None) -> Tensor:
        x = u if self.lang_emb is None else torch.cat([self.lang_emb(target_lang), u], dim=-1)
        hidden = F.silu(self.fc(x))
        if columns is None:
            return self.out(hidden)
        return F.linear(hidden, self.out.weight[columns], self.out.bias[columns])


class ContrastiveHead(nn.Module):
    """(B, d) -> (B, d_contrastive): h(u) = W1 ReLU(W2 u), paper Eq. 8-10; without
    `contrastive_projection`, the identity (B, d) -> (B, d): the loss acts on u itself."""

    def __init__(self, cfg: EMSConfig):
        super().__init__()
        self.net = (
            nn.Sequential(nn.Linear(cfg.d_model, cfg.d_model), nn.ReLU(), nn.Linear(cfg.d_model, cfg.d_contrastive))
            if cfg.contrastive_projection
            else nn.Identity()
        )

    def forward(self, u: Tensor) -> Tensor:
        return self.net(u)


class EMSModel(nn.Module):
    """Encoder + training heads. forward(batch) -> dict of batch-mean losses (paper Eq. 12).
    `global_negatives`: the contrastive softmax and the duplicate mask take every rank's batch
    (TrainConfig.global_negatives: how the loss is computed across ranks, not saved with the model)."""

    def __init__(self, cfg: EMSConfig, global_negatives: bool = False):
        super().__init__()
        self.cfg = cfg
        self.global_negatives = global_negatives
        self.encoder = EncoderNetwork(cfg)
        self.xtr_head = XTRHead(cfg)
        self.contrastive_head = ContrastiveHead(cfg)
        self.apply(_init_weights)

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        src_lang: Tensor,
        tgt_lang: Tensor,
        content_ids: Tensor | None = None,
        teacher: Tensor | None = None,
        teacher_mask: Tensor | None = None,
        per_example: bool = False,
        packing: Packing | None = None,
        vocabulary: BatchVocabulary | None = None,
    ) -> dict[str, Tensor]:
        """src, tgt: (B, L) padded token ids of the two sides; src_lang, tgt_lang: (B,) language indices;
        content_ids: (B, 2) ids of both sides' texts, which find the in-batch duplicates (see
        `EMSConfig.duplicate_negatives`; None: every other row is a negative); teacher: (B, d_sentence)
        the teacher's vector of each pair's source sentence and teacher_mask: (B,) bool, the rows
        that have one (ems.teacher_store.TeacherTargets; needed when distill_weight > 0).

        Returns {"loss": the weighted sum to backpropagate, and for each of ems.losses.OBJECTIVES ("xtr",
        "contrastive", "distill") its detached batch mean (0 for an objective whose weight is 0: it is not
        computed; distill over the rows with a teacher vector), "duplicate_rows": the share of rows with a
        duplicate among their in-batch candidates (0 without content ids)}; with `per_example`, also for
        each objective "<name>_per_example" (B,) and "<name>_rows" (B,) bool, the rows its mean is over.

        packing: the Packing of the (2B, L) rows [src; tgt] (ems.training.batches.collate makes it on the host);
        vocabulary: with xtr_vocabulary "batch", the BatchVocabulary of the targets [tgt; src]. Without them
        both are found here, reading the token ids on the host (a device sync on a GPU)."""
        src, tgt = src[:, : self.cfg.max_len], tgt[:, : self.cfg.max_len]
        width = max(src.shape[1], tgt.shape[1])
        # Both sides go through the shared encoder as one batch of 2B sentences.
        both = torch.cat(
            [
                F.pad(src, (0, width - src.shape[1]), value=self.cfg.pad_id),
                F.pad(tgt, (0, width - tgt.shape[1]), value=self.cfg.pad_id),
            ]
        )
        uv = self.encoder.pool(both, packing)  # u (sources) then v (targets)
        b = src.shape[0]
        xtr = contrastive = distill = uv.new_zeros(b, dtype=torch.float32)
        has_teacher = uv.new_zeros(b, dtype=torch.bool)
        if self.cfg.xtr_weight:
            # Each head runs once over all 2B sentences: u predicts the target's tokens, v the source's.
            targets, pad_id, columns, valid = torch.cat([both[b:], both[:b]]), self.cfg.pad_id, None, None
            if self.cfg.xtr_vocabulary == "batch":
                if vocabulary is None:
                    vocabulary = BatchVocabulary.of(targets.cpu().numpy(), pad_id).to(targets.device)
                columns, valid, targets = vocabulary.columns, vocabulary.valid, vocabulary.targets
                pad_id = len(columns)
            logits = self.xtr_head(uv, torch.cat([tgt_lang, src_lang]), columns)
            if valid is not None:  # a static-shape batch's padded columns are no candidates
                logits = logits.masked_fill(~valid, float("-inf"))
            xtr_both = xtr_loss(logits, targets, pad_id)
            xtr = xtr_both[:b] + xtr_both[b:]
        duplicates = None
        if content_ids is not None:
            pool, offset = gather_rows(content_ids) if self.global_negatives else (content_ids, 0)
            duplicates = duplicate_mask(content_ids, pool, offset)
        if self.cfg.contrastive_weight:
            h_u, h_v = self.contrastive_head(uv).chunk(2)
            in_batch_loss = global_contrastive_loss if self.global_negatives else contrastive_loss
            contrastive = in_batch_loss(
                h_u, h_v, self.cfg.temperature, duplicates, self.cfg.duplicate_negatives, self.cfg.contrastive_margin
            )
        if self.cfg.distill_weight:
            if teacher is None:
                raise ValueError("distill_weight > 0 needs the teacher's vectors in the batch (TrainConfig.teacher)")
            has_teacher = (
                teacher_mask if teacher_mask is not None else torch.ones(b, dtype=torch.bool, device=uv.device)
            )
            out_uv = self.encoder.project(uv)  # the exported vectors: the teacher's dimension
            distill = distill_loss(out_uv[:b], out_uv[b:], teacher) * has_teacher
        losses = {"xtr": xtr, "contrastive": contrastive, "distill": distill}
        rows = {"distill": has_teacher}  # the rows an objective's mean is over, where not every row
        # distill over the rows with a teacher vector; a batch without any adds 0 (and no gradient)
        means = {
            name: losses[name].sum() / rows[name].sum().clamp(min=1) if name in rows else losses[name].mean()
            for name in OBJECTIVES
        }
        loss = self.cfg.weighted_loss(means)
        out = {
            "loss": loss,
            **{name: means[name].detach() for name in OBJECTIVES},
            "duplicate_rows": duplicates.any(dim=1).float().mean() if duplicates is not None else loss.new_zeros(()),
        }
        if per_example:
            for name in OBJECTIVES:
                out[f"{name}_per_example"] = losses[name].detach()
                out[f"{name}_rows"] = rows.get(name, torch.ones(b, dtype=torch.bool, device=uv.device))
        return out


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=0.02)
        nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)
        if module.padding_idx is not None:
            nn.init.zeros_(module.weight[module.padding_idx])
