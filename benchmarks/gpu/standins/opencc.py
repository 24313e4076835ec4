"""Stand-in for opencc (traditional -> simplified Chinese) from the recorded table (_segmentation_table)."""

from _segmentation_table import lookup


class OpenCC:
    def __init__(self, config: str = "t2s") -> None:
        self.config = config

    def convert(self, text: str) -> str:
        return lookup("opencc", text)
