"""The EMS dual transformer: one encoder shared by both sides of a parallel pair.

`EncoderNetwork` (token ids -> mean-pooled sentence vector u, optionally mapped to `d_output`
dimensions) is what inference keeps; `XTRHead` and `ContrastiveHead` exist only for training and
are dropped at export. A third objective, multilingual knowledge distillation (Reimers & Gurevych
2020, `ems.losses.distill_loss`), needs no head: it pulls the encoder's output (u, or its d_output
map) of both sides towards a teacher's vector; XTR and contrastive act on u. The config that shapes
all of them, and the presets, are ems.model_config's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from torch import Tensor, nn

from ems.losses import (
    OBJECTIVES,
    contrastive_loss,
    distill_loss,
    duplicate_mask,
    gather_rows,
    global_contrastive_loss,
    xtr_loss,
)
from ems.model_config import EMSConfig
from ems.packing import BatchVocabulary, Layout, Packer, Packing


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
    "auto": varlen on CUDA in bf16/fp16 where torch has it; on CPU with gradients matmul; else sdpa.
    "varlen" off CUDA or without torch's varlen module is a ValueError of one line (torch's own error
    is a long traceback from inside the kernel)."""
    if setting == "auto":
        if device.type == "cuda" and dtype in (torch.bfloat16, torch.float16) and varlen_attention_available():
            return "varlen"
        return "matmul" if device.type == "cpu" and torch.is_grad_enabled() else "sdpa"
    if setting == "varlen" and (device.type != "cuda" or not varlen_attention_available()):
        where = f"on {device.type}" if device.type != "cuda" else f"with torch {torch.__version__}, which lacks it"
        raise ValueError(
            f"attention varlen runs only on CUDA with torch.nn.attention.varlen (torch >= 2.10), not {where}: "
            "use attention auto (varlen where it runs), sdpa or matmul"
        )
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
            if packing.groups:  # each group's tokens are one slice of the packed tokens, in order
                attn = torch.cat([self.attend(real[g.start : g.stop], g.layout, path) for g in packing.groups])
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
        runs varlen (it needs neither groups nor a padded layout) or the shapes are static (a compiled step)."""
        groups = 0 if varlen or static_shapes else self.cfg.attention_group_rows
        return Packer(self.cfg.pad_id, self.cfg.max_len, groups, static_shapes, varlen)

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
        self.pad_id = cfg.pad_id
        self.batch_vocabulary = cfg.xtr_vocabulary == "batch"
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

    def loss(
        self, u: Tensor, targets: Tensor, target_lang: Tensor, vocabulary: BatchVocabulary | None = None
    ) -> Tensor:
        """(N,) XTR loss of each row (ems.losses.xtr_loss): u (N, d) predicts the tokens of `targets` (N, L),
        padded with pad_id, in `target_lang` (N,). With xtr_vocabulary "batch" the softmax's candidates are
        the tokens of `targets` only: `vocabulary` is their BatchVocabulary, or None to find it here, reading
        the token ids on the host (a device sync on a GPU)."""
        if not self.batch_vocabulary:
            return xtr_loss(self(u, target_lang), targets, self.pad_id)
        if vocabulary is None:
            vocabulary = BatchVocabulary.of(targets.cpu().numpy(), self.pad_id).to(targets.device)
        logits = self(u, target_lang, vocabulary.columns)
        if vocabulary.valid is not None:  # a static-shape batch's padded columns are no candidates
            logits = logits.masked_fill(~vocabulary.valid, float("-inf"))
        return xtr_loss(logits, vocabulary.targets, len(vocabulary.columns))


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
            # The head runs once over all 2B sentences: u predicts the target's tokens, v the source's.
            xtr_both = self.xtr_head.loss(
                uv, torch.cat([both[b:], both[:b]]), torch.cat([tgt_lang, src_lang]), vocabulary
            )
            xtr = xtr_both[:b] + xtr_both[b:]
        duplicates = None
        if content_ids is not None:
            pool, offset = gather_rows(content_ids) if self.global_negatives else (content_ids, 0)
            duplicates = duplicate_mask(content_ids, pool, offset)
        if self.cfg.contrastive_weight:
            contrastive = self._contrastive(uv, duplicates)
        if self.cfg.distill_weight:
            distill, has_teacher = self._distill(uv, teacher, teacher_mask)
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

    def _contrastive(self, uv: Tensor, duplicates: Tensor | None) -> Tensor:
        """(B,) in-batch contrastive loss of each pair, both directions (ems.losses.contrastive_loss), over
        every rank's batch with global_negatives; `duplicates` the duplicate mask (None: none known)."""
        h_u, h_v = self.contrastive_head(uv).chunk(2)
        in_batch_loss = global_contrastive_loss if self.global_negatives else contrastive_loss
        cfg = self.cfg
        return in_batch_loss(
            h_u, h_v, cfg.contrastive_temperature, duplicates, cfg.duplicate_negatives, cfg.contrastive_margin
        )

    def _distill(self, uv: Tensor, teacher: Tensor | None, teacher_mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """(B,) distillation loss of each pair (0 where it has no teacher vector) and the (B,) rows that have one."""
        if teacher is None:
            raise ValueError("distill_weight > 0 needs the teacher's vectors in the batch (TrainConfig.teacher)")
        b = uv.shape[0] // 2
        has_teacher = teacher_mask if teacher_mask is not None else torch.ones(b, dtype=torch.bool, device=uv.device)
        out_uv = self.encoder.project(uv)  # the exported vectors: the teacher's dimension
        return distill_loss(out_uv[:b], out_uv[b:], teacher) * has_teacher, has_teacher


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=0.02)
        nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)
        if module.padding_idx is not None:
            nn.init.zeros_(module.weight[module.padding_idx])
