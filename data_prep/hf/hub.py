"""A Hub id, online or not: whether the Hugging Face Hub is used, and what a Hub id the cache lacks says.

In: a source path (a Hub id, `owner/name`) and, for load_hub, the loader of the datasets library; out:
datasets' offline mode for the import when HF_HUB_OFFLINE=1 (or HF_DATASETS_OFFLINE=1) is set or the
Hub does not answer within HUB_PROBE_SECONDS (then a Hub id is read from the local datasets cache, a
dataset loaded once with `datasets.load_dataset`), and for a Hub id the cache does not hold one
HFImportError naming the cache and the local-path alternative, without the minutes of retries the
libraries would spend.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

from data_prep.hf.errors import HFImportError
from ems.cli import one_line

HUB_PROBE_SECONDS = 5.0
HUB_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")


@contextlib.contextmanager
def hub_access(path: str) -> Iterator[str | None]:
    """For a Hub id: datasets' offline mode for the block when it is set, or when the Hub does not
    answer (then switched on here, and off again after); yields why the Hub is not used (None: it is)."""
    import datasets
    from huggingface_hub import constants

    if Path(path).exists() or not HUB_ID.fullmatch(path):
        yield None
        return
    if datasets.config.HF_HUB_OFFLINE:
        yield "offline mode is on (HF_HUB_OFFLINE or HF_DATASETS_OFFLINE)"
        return
    reason = _hub_unreachable()
    if reason is None:
        yield None
        return
    saved = datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE = True
    try:
        yield reason
    finally:
        datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE = saved


def _hub_unreachable() -> str | None:
    """Why the Hub's endpoint does not answer within HUB_PROBE_SECONDS (None: it answers)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session, httpx

    try:
        get_session().head(constants.ENDPOINT, timeout=HUB_PROBE_SECONDS)
    except httpx.TransportError as error:  # no route, no DNS, refused, timed out, a proxy error
        return f"{constants.ENDPOINT} does not answer: {one_line(error)}"
    return None


def load_hub(load, repo: str, config: str | None, cache_dir: str | None, offline_reason: str | None):
    import datasets

    try:
        return load(repo, name=config)
    except (ConnectionError, FileNotFoundError, ValueError) as error:
        if offline_reason is None:
            raise
        source = f"{repo}{f':{config}' if config else ''}"
        cache = cache_dir or datasets.config.HF_DATASETS_CACHE
        raise HFImportError(
            f"{source}: no such local path, the Hugging Face Hub is not used ({offline_reason}) and the "
            f"datasets cache {cache} does "
            f"not hold it ({one_line(error)}); where there is a network, save it "
            f"(datasets.load_dataset(...).save_to_disk(DIR), or `hf download {repo} --repo-type dataset "
            f"--local-dir DIR`) and import the local path: ems-prep import --format hf DIR"
            f"{f':{config}' if config else ''}"
        ) from None
