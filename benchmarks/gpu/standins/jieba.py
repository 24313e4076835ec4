"""Stand-in for jieba (Chinese word segmentation) from the recorded table (_segmentation_table)."""

from _segmentation_table import lookup


def setLogLevel(level: int) -> None:  # noqa: N802 (jieba's name)
    """jieba's API; nothing to log here."""


def initialize() -> None:
    """jieba's API; the table loads on first use."""


def cut(text: str):
    return iter(lookup("jieba", text))
