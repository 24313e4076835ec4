"""The evaluators: one module per protocol, an encoder and a test set in, a result mapping out.

An evaluator whose task has keys of its own takes that task's config as it is: the TaskConfig
subclass defined beside it (BuccConfig, XsimConfig, ...; eval.task), read and checked once by the
config system, plus the data directory and the run's options (language selection, sentence cap)
as arguments; it checks no key again.
eval/tasks/ holds the task types (what a config's `type:` names), the glue from a run to these.
Each runs its languages (pairs, tracks) through one loop, eval.evaluators.items.score_items.
Readers live beside their evaluator (qe, sts and classification_data read the files that
correlation and classification score; retrieval holds the bidirectional P@1 scoring and
aligned-file readers that Tatoeba, FLORES, held-out and bitext share).
"""
