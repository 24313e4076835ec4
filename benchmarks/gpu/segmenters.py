"""The GPU acceptance run's Chinese and Japanese segmentation: the installed jieba, MeCab and OpenCC, or
the stand-ins of benchmarks/gpu/standins answering from the prepared table, loaded for the run's duration.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from contextlib import contextmanager
from pathlib import Path

STANDINS = Path(__file__).resolve().parent / "standins"
SEGMENTER_PACKAGES = ("jieba", "fugashi", "unidic_lite", "opencc")


@contextmanager
def segmenters(mode: str, table: Path):
    """Chinese and Japanese segmentation for the run: the installed jieba, MeCab and OpenCC ("installed"),
    or the stand-ins of benchmarks/gpu/standins answering from the prepared table ("table"; "auto": where
    any of them is missing). The stand-ins are loaded as the modules jieba, fugashi and opencc of this process
    and named first in the PYTHONPATH that spawned tokenizer workers inherit; ems.text's cached segmenters are
    dropped; all restored on exit. Yields
    {"mode", "detail"}."""
    import ems.text

    missing = [name for name in SEGMENTER_PACKAGES if importlib.util.find_spec(name) is None]
    if mode == "installed" or (mode == "auto" and not missing):
        yield {"mode": "installed", "detail": "the installed jieba, fugashi (unidic-lite) and opencc"}
        return
    names = ("jieba", "fugashi", "opencc", "_segmentation_table")
    saved_modules = {name: sys.modules.pop(name) for name in names if name in sys.modules}
    saved_env = {key: os.environ.get(key) for key in ("PYTHONPATH", "EMS_SEGMENTATION_TABLE")}
    getters = (ems.text._jieba, ems.text._mecab, ems.text._opencc)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(STANDINS), saved_env["PYTHONPATH"]]))
    os.environ["EMS_SEGMENTATION_TABLE"] = str(table)
    for name in ("_segmentation_table", "jieba", "fugashi", "opencc"):  # the table first: the others import it
        spec = importlib.util.spec_from_file_location(name, STANDINS / f"{name}.py")
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    for getter in getters:
        getter.cache_clear()
    why = f"missing: {', '.join(missing)}" if missing else "--segmenters table"
    try:
        yield {"mode": "table", "detail": f"the stand-ins of benchmarks/gpu/standins on {table.name} ({why})"}
    finally:
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(saved_modules)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        for getter in getters:
            getter.cache_clear()
