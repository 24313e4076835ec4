"""Tatoeba similarity search: LASER's test set of up to 1000 English sentences and their
translations for 112 languages, scored by bidirectional P@1 (see eval.evaluators.retrieval).

In: an encoder and a TaskRun: a TatoebaConfig (configs/eval/tatoeba.yaml: the file pattern, the
Tatoeba codes, groups, LASER's duplicate rule), the data directory and the run's options (its
--languages replace the config's codes; a sentence cap). Out: P@1 per language, their average and
the groups' (`evaluate_tatoeba`, the evaluator of the task type `tatoeba`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ems.cli import MissingDataError
from ems.encoder_kinds import Encoder, encoder_languages
from ems.languages import TATOEBA_ENGLISH_CODE, TATOEBA_TEST_CODES, tatoeba_code_to_lang
from eval.evaluators.items import score_items
from eval.evaluators.retrieval import (
    MEAN_P_AT_1,
    Bitext,
    check_max_sentences,
    evaluate_bitexts,
    group_averages,
    read_aligned_files,
)
from eval.report import markdown_table
from eval.task import Languages, TaskConfig, TaskRun, TaskType, refuse

TATOEBA_SOURCE = "https://github.com/facebookresearch/LASER/tree/main/data/tatoeba/v1"
DEFAULT_FILE_PATTERN = "tatoeba.{code}-eng.{side}"  # side: the language's code, or "eng"
UNKNOWN_CODE = "unknown Tatoeba code"
NO_TATOEBA_SET = "no Tatoeba test set"
SUPPORTED_METRIC = "p_at_1"
SEEN, UNSEEN = "seen in training", "unseen in training"


@dataclass(kw_only=True)
class TatoebaConfig(TaskConfig):
    """configs/eval/tatoeba.yaml: the LASER file pattern (`{code}`: the Tatoeba code, `{side}`: the
    code or eng; DEFAULT_FILE_PATTERN names tatoeba.deu-eng.deu and tatoeba.deu-eng.eng), the metric
    (p_at_1, the only one), the Tatoeba codes ("all": every set in the directory), groups averaged
    in the report ({group: canonical codes}) and LASER's duplicate rule (retrieving a sentence
    identical to the gold one is correct)."""

    file_pattern: str
    metric: str
    languages: Languages
    groups: dict[str, list[str]] | None = None
    laser_duplicates: bool = True

    def __post_init__(self):
        problems = []
        if self.metric != SUPPORTED_METRIC:
            problems.append(f"metric {self.metric!r} is not supported (only {SUPPORTED_METRIC!r})")
        if "{code}" not in self.file_pattern or "{side}" not in self.file_pattern:
            problems.append(f"file_pattern must contain {{code}} and {{side}}, got {self.file_pattern!r}")
        unknown = [code for code in self.languages if code not in TATOEBA_TEST_CODES] if self.languages != "all" else []
        if unknown:
            problems.append(
                f"languages: not Tatoeba test-set codes: {', '.join(map(repr, unknown))} "
                f"(expected lowercase 3-letter codes such as 'deu', 'cmn'; see ems.languages)"
            )
        refuse(self, problems)


def find_tatoeba_codes(data_dir: Path, file_pattern: str = DEFAULT_FILE_PATTERN) -> list[str]:
    """Sorted codes of the test sets in `data_dir`, recognised by either of their two files (so a
    set with one file missing is found, and reported when it is read)."""
    pattern = re.escape(file_pattern)
    for field, group in (("code", "(?P<code>.+?)"), ("side", "(?P<side>.+)")):
        if pattern.count(re.escape(f"{{{field}}}")) != 1:
            raise ValueError(f"file_pattern must contain {{{field}}} exactly once, got {file_pattern!r}")
        pattern = pattern.replace(re.escape(f"{{{field}}}"), group)
    codes = set()
    for path in Path(data_dir).iterdir():
        match = re.fullmatch(pattern, path.name)
        if match and match["side"] in (match["code"], TATOEBA_ENGLISH_CODE):
            codes.add(match["code"])
    return sorted(codes)


def _expected_files(file_pattern: str, code: str = "deu") -> str:
    xx_name = file_pattern.format(code=code, side=code)
    return f"{xx_name} and {file_pattern.format(code=code, side=TATOEBA_ENGLISH_CODE)}"


def load_tatoeba_pair(
    data_dir: Path, code: str, max_sentences: int | None = None, file_pattern: str = DEFAULT_FILE_PATTERN
) -> tuple[list[str], list[str]]:
    """(xx_sentences, eng_sentences) of one Tatoeba language, line-aligned.

    Raises MissingDataError naming a missing file and where to get it, ValueError on unequal line counts.
    """
    data_dir = Path(data_dir)
    xx_path = data_dir / file_pattern.format(code=code, side=code)
    en_path = data_dir / file_pattern.format(code=code, side=TATOEBA_ENGLISH_CODE)
    for path in (xx_path, en_path):
        if not path.is_file():
            raise MissingDataError(
                f"missing Tatoeba file {path}: download {_expected_files(file_pattern, code)} "
                f"from the LASER repository ({TATOEBA_SOURCE}) into {data_dir}"
            )
    return read_aligned_files(xx_path, en_path, max_sentences, data_dir)


def evaluate_tatoeba(encoder: Encoder, task: TaskRun) -> dict:
    """Bidirectional P@1 (%) on each Tatoeba language the encoder covers (`encoder.languages` None = all),
    in the files of `task.data_dir`: the run's Tatoeba codes (`task.options.tatoeba_codes`, from
    --languages) or else the config's; the first `max_sentences` pairs of each (None: all). The
    run's languages without a Tatoeba test set are listed under NO_TATOEBA_SET.

    With `config.laser_duplicates` (LASER's rule, source/lib/indexing.py IndexSearchMultiple with
    texts) a retrieved sentence identical to the gold one counts as correct, and each language
    counts such retrievals under "duplicate_hits".
    Returns {"task", "data_dir", "max_sentences", "laser_duplicates", "languages": {canonical lang:
    {source (Tatoeba code), n, xx2en, en2xx, mean, duplicate_hits}}, "average": {xx2en, en2xx, mean,
    n_languages, n} or None, "skipped": {reason: [codes]}, "data_errors": {canonical lang: why its
    files could not be read},
    "groups": {group: averages over its evaluated languages}}. A missing, unreadable or
    misaligned file costs only its language (eval.faults); a missing directory raises
    MissingDataError. Groups
    are the config's, plus seen / unseen in training when the encoder says which languages it was
    trained on (`training_languages`, else `languages`).
    """
    config, options = task.config, task.options
    data_dir, pattern, max_sentences = Path(task.data_dir), config.file_pattern, options.max_sentences
    check_max_sentences(max_sentences)
    if not data_dir.is_dir():
        raise MissingDataError(
            f"Tatoeba data directory {data_dir} does not exist; it should hold LASER's test set "
            f"({_expected_files(pattern)}, ... for 112 languages) from {TATOEBA_SOURCE}"
        )
    codes = options.tatoeba_codes
    if codes is None and config.languages != "all":
        codes = config.languages
    if codes is None:
        codes = find_tatoeba_codes(data_dir, pattern)
        if not codes:
            raise MissingDataError(
                f"no Tatoeba files in {data_dir}: expected {_expected_files(pattern)}, ... from {TATOEBA_SOURCE}"
            )

    def read(code: str) -> Bitext:
        xx, en = load_tatoeba_pair(data_dir, code, max_sentences, pattern)
        return Bitext(lang=tatoeba_code_to_lang(code), source=code, xx=xx, en=en)

    known = score_items(
        codes,
        read,
        key=lambda code: tatoeba_code_to_lang(code) if code in TATOEBA_TEST_CODES else code,
        skip=lambda code: None if code in TATOEBA_TEST_CODES else UNKNOWN_CODE,
        desc=config.name,
    )
    bitexts, skipped, errors = list(known.rows.values()), known.skipped, known.errors
    result = evaluate_bitexts(encoder, bitexts, config.name, skipped, options.progress, errors, config.laser_duplicates)
    if options.without_tatoeba:
        result["skipped"][NO_TATOEBA_SET] = options.without_tatoeba
    groups = dict(config.groups or {})
    seen = getattr(encoder, "training_languages", None) or encoder_languages(encoder)
    if seen is not None:
        groups[SEEN] = [lang for lang in result["languages"] if lang in seen]
        groups[UNSEEN] = [lang for lang in result["languages"] if lang not in seen]
    result["groups"] = group_averages(result["languages"], groups)
    return {"task": result.pop("task"), "data_dir": str(data_dir), "max_sentences": max_sentences, **result}


TASK = TaskType(metric="p_at_1", run=evaluate_tatoeba, table=markdown_table, config=TatoebaConfig, headline=MEAN_P_AT_1)
