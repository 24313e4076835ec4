"""Reversible disentanglement (Fukushima, Kajiwara, Ninomiya, MRL 2025, "Reversible Disentanglement
of Meaning and Language Representations from Multilingual Sentence Encoders"): only the meaning
part is extracted, the language part is the remainder, so meaning + language = e exactly.

    Eq. (1)  e_M = MLP(e)        Eq. (2)  e_L = e - e_M

"Our MLP is a single-layer feed-forward neural network" (Sec. 3.1): one d x d linear layer
(`hidden_dim` > 0, a project option, inserts one ReLU hidden layer). Training uses only the
paper's objective L = L_M + L_L + L_C (Eqs. 3-6, see `reversible_losses`); there is no language
classifier ("Only MLP is trained").
"""

from __future__ import annotations

from torch import Tensor, nn

from ems.heads.training import (
    Decomposition,
    HeadHyperparameters,
    LossFunction,
    PairBatch,
    TrainedHead,
    cosine_embedding_loss,
    linear_extractor,
)


def _one_minus_cos(a: Tensor, b: Tensor) -> Tensor:
    """Batch mean of 1 - cos(a_i, b_i)."""
    return cosine_embedding_loss(a, b, similar=True)


def _hinge_cos(a: Tensor, b: Tensor) -> Tensor:
    """Batch mean of max(0, cos(a_i, b_i))."""
    return cosine_embedding_loss(a, b, similar=False)


def reversible_losses(
    s: Decomposition, t: Decomposition, s_other: Decomposition, t_other: Decomposition
) -> dict[str, Tensor]:
    """The paper's objective for translation pairs (s_i, t_i); s_other_i (s') / t_other_i (t')
    are randomly selected other sentences of s_i's / t_i's language ("sentences s' and t',
    randomly selected from the source and target languages, respectively"). Every per-pair term
    is averaged over the batch (the paper writes the loss for one pair and does not say how a
    batch is reduced; the mean is our choice). Weights are exactly the paper's:

    Eq. (4)  L_M = 2 (1 - cos(s_M, t_M)) + max(0, cos(s_M, s'_M)) + max(0, cos(t_M, t'_M))
    Eq. (5)  L_L = (1 - cos(s_L, s'_L)) + (1 - cos(t_L, t'_L))
    Eq. (6)  L_C = max(0, cos(s_M, s_L)) + max(0, cos(t_M, t_L))
                   + 2 - cos(s, s_M + s'_L) - cos(t, t_M + t'_L)
                   + 2 - cos(s, t_M + s_L) - cos(t, s_M + t_L)
    Eq. (3)  L = L_M + L_L + L_C                         ("total", what is minimised)

    Returns "meaning" (L_M), "language" (L_L), "cross_reconstruction" (L_C) and "total".
    """
    # Eq. (6) writes the reconstruction targets as \hat{s} and \hat{t}, symbols the paper never
    # defines (hats mark the extracted parts). The text says "we want to reconstruct the original
    # sentence embeddings by adding meaning and language embeddings", so we read \hat{s} / \hat{t}
    # as the original embeddings s / t (Decomposition.embedding).
    losses = {
        # "Note that the first term is weighted to balance the positive and negative terms."
        "meaning": 2 * _one_minus_cos(s.meaning, t.meaning)
        + _hinge_cos(s.meaning, s_other.meaning)
        + _hinge_cos(t.meaning, t_other.meaning),
        "language": _one_minus_cos(s.language, s_other.language) + _one_minus_cos(t.language, t_other.language),
        "cross_reconstruction": _hinge_cos(s.meaning, s.language)
        + _hinge_cos(t.meaning, t.language)
        # 2 - cos(s, s_M + s'_L) - cos(t, t_M + t'_L): language parts swapped within a language
        + _one_minus_cos(s.embedding, s.meaning + s_other.language)
        + _one_minus_cos(t.embedding, t.meaning + t_other.language)
        # 2 - cos(s, t_M + s_L) - cos(t, s_M + t_L): meaning parts swapped between translations
        + _one_minus_cos(s.embedding, t.meaning + s.language)
        + _one_minus_cos(t.embedding, s.meaning + t.language),
    }
    losses["total"] = losses["meaning"] + losses["language"] + losses["cross_reconstruction"]
    return losses


def pair_losses(module: nn.Module, batch: PairBatch) -> dict[str, Tensor]:
    """`reversible_losses` on one batch, every sentence and its same-language partner decomposed by `module`."""
    return reversible_losses(module(batch.x), module(batch.y), module(batch.x_other), module(batch.y_other))


class ReversibleModule(nn.Module):
    """meaning = MLP(e) (Eq. 1), language = e - meaning (Eq. 2). The paper does not state an
    initialisation; the MLP keeps PyTorch's default one. (An identity start, meaning = e and
    language = 0, cannot be used with this objective: cos(s_M, s_L) with s_L = 0 has a gradient
    of order 1/sqrt(eps) ~ 1e6 in torch's cosine loss, which swamps Adam's second-moment
    estimate and stalls training: on the synthetic data of tests/test_heads_trained.py the
    identity start never improved on its first epoch, the default start trained.)"""

    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.meaning = linear_extractor(dim, hidden_dim)

    def forward(self, embeddings: Tensor) -> Decomposition:
        meaning = self.meaning(embeddings)
        return Decomposition(embeddings, meaning, embeddings - meaning)


class ReversibleHead(TrainedHead):
    """Reversible head, trained with the paper's objective (see `reversible_losses`).

    Optimiser settings from Sec. 3.1: "We used a batch size of 512, Adam (Kingma and Ba, 2015)
    optimizer with a learning rate of 10^{-4}. We employed early stopping for training with a
    patience of 5 epochs using a validation loss of Equation (3)." -> batch_size 512, lr 1e-4,
    patience 5, model selection on "total" (= Eq. 3).

    The paper states no epoch limit. Its Limitations give "about 12 minutes per epoch ... and
    about 5 to 9 hour for the entire training", i.e. about 25-45 epochs; we cap training at 45
    epochs (early stopping usually ends it sooner on the paper's data sizes). The paper trains on
    50k-1M pairs per language pair; with far fewer pairs an epoch has few steps and lr 1e-4 may
    need more epochs than this cap: pass other HeadHyperparameters to change it."""

    name = "reversible"
    default_hyperparameters = HeadHyperparameters(learning_rate=1e-4, batch_size=512, max_epochs=45, patience=5)

    def build_module(self, dim: int, n_languages: int) -> nn.Module:
        # n_languages is unused: the paper's objective has no language classifier.
        return ReversibleModule(dim, self.hyperparameters.hidden_dim)

    def loss_function(self, module: nn.Module) -> LossFunction:
        return lambda batch: pair_losses(module, batch)
