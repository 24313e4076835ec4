"""The built-in evaluation task types, one module each defining `TASK` (see eval.task)."""
