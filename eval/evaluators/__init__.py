"""The evaluators: one module per protocol, an encoder and a test set in, a result mapping out.

They know nothing of task configs: eval/tasks/ holds the task types (what a config's `type:` names),
which read a config and call these. Each runs its languages (pairs, tracks) through one loop,
eval.evaluators.items.score_items. Readers live beside their evaluator (qe, sts and
classification_data read the files that correlation and classification score; retrieval holds the
bidirectional P@1 scoring and aligned-file readers that Tatoeba, FLORES, held-out and bitext share).
"""
