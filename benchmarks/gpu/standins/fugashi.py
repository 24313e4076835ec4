"""Stand-in for fugashi (MeCab, Japanese word segmentation) from the recorded table (_segmentation_table)."""

from _segmentation_table import lookup


class Tagger:
    def __init__(self, arguments: str = "") -> None:
        self.arguments = arguments

    def parse(self, text: str) -> str:
        return lookup("mecab", text)
