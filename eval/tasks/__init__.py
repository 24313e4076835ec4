"""The built-in evaluation task types, one module each defining its config dataclass and `TASK` (see eval.task)."""
