"""The task types: one module per protocol, holding its config, its evaluator and its TaskType.

A task type's module (tatoeba, flores, heldout, bitext, xsim, bucc, large_retrieval,
classification, language_id, qe, sts) defines the type's config (a TaskConfig subclass, read and
checked once by the config system), its evaluator `evaluate_<type>(encoder, task)`, which takes an
ems.encoder_kinds.Encoder and the eval.task.TaskRun (that config as it is, the data directory and
the run's options: language filter, sentence cap) and checks no key again, and `TASK`, the
TaskType that a config's `type:` finds (eval.task.task_type).
Each runs its languages (pairs, tracks) through one loop, eval.evaluators.items.score_items.
The other modules are shared: readers live beside their evaluator (qe, sts and classification_data
read the files that correlation and classification score; retrieval holds the bidirectional P@1
scoring and aligned-file readers that Tatoeba, FLORES, held-out and bitext share).
"""
