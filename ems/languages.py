"""Language codes: LASER's Tatoeba test-set codes and FLORES-200's file stems <-> the project's
canonical codes.

Canonical codes are ISO 639-1 where one exists, else ISO 639-3 (always lowercase). Tatoeba
names its files with 3-letter codes (`tatoeba.deu-eng.deu`), mostly ISO 639-3 individual
languages (`cmn`, `lvs`, `zsm`, `pes`, `swh`), which we fold into the macrolanguage's
ISO 639-1 code (`zh`, `lv`, `ms`, `fa`, `sw`); the one collective code, `ber`, is kept as is.

`canonical_language` is the one normaliser of language tags (any case, ISO 639-1/639-2/639-3,
BCP 47 or FLORES-style `deu_Latn`, `cmn_Hans`, `zh-Hant`) to canonical codes, built on langcodes;
`resolve_language` maps a user's tag to one of a model's languages, or says which it has.
`flores_file` finds a language's file in a FLORES-200 split directory, `flores_languages` lists
them all under their keys (`flores_language`: the rule for languages FLORES has in several files).
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import re
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

TATOEBA_ENGLISH_CODE = "eng"  # every Tatoeba test set pairs a language with English
ENGLISH = "en"

# (Tatoeba code, canonical code, English name), one row per test set, sorted by Tatoeba code.
TATOEBA_LANGUAGES: tuple[tuple[str, str, str], ...] = (
    ("afr", "af", "Afrikaans"),
    ("amh", "am", "Amharic"),
    ("ang", "ang", "Old English"),
    ("ara", "ar", "Arabic"),
    ("arq", "arq", "Algerian Arabic"),
    ("arz", "arz", "Egyptian Arabic"),
    ("ast", "ast", "Asturian"),
    ("awa", "awa", "Awadhi"),
    ("aze", "az", "Azerbaijani"),
    ("bel", "be", "Belarusian"),
    ("ben", "bn", "Bengali"),
    ("ber", "ber", "Berber"),
    ("bos", "bs", "Bosnian"),
    ("bre", "br", "Breton"),
    ("bul", "bg", "Bulgarian"),
    ("cat", "ca", "Catalan"),
    ("cbk", "cbk", "Chavacano"),
    ("ceb", "ceb", "Cebuano"),
    ("ces", "cs", "Czech"),
    ("cha", "ch", "Chamorro"),
    ("cmn", "zh", "Chinese (Mandarin)"),
    ("cor", "kw", "Cornish"),
    ("csb", "csb", "Kashubian"),
    ("cym", "cy", "Welsh"),
    ("dan", "da", "Danish"),
    ("deu", "de", "German"),
    ("dsb", "dsb", "Lower Sorbian"),
    ("dtp", "dtp", "Central Dusun"),
    ("ell", "el", "Greek"),
    ("epo", "eo", "Esperanto"),
    ("est", "et", "Estonian"),
    ("eus", "eu", "Basque"),
    ("fao", "fo", "Faroese"),
    ("fin", "fi", "Finnish"),
    ("fra", "fr", "French"),
    ("fry", "fy", "Western Frisian"),
    ("gla", "gd", "Scottish Gaelic"),
    ("gle", "ga", "Irish"),
    ("glg", "gl", "Galician"),
    ("gsw", "gsw", "Swiss German"),
    ("heb", "he", "Hebrew"),
    ("hin", "hi", "Hindi"),
    ("hrv", "hr", "Croatian"),
    ("hsb", "hsb", "Upper Sorbian"),
    ("hun", "hu", "Hungarian"),
    ("hye", "hy", "Armenian"),
    ("ido", "io", "Ido"),
    ("ile", "ie", "Interlingue"),
    ("ina", "ia", "Interlingua"),
    ("ind", "id", "Indonesian"),
    ("isl", "is", "Icelandic"),
    ("ita", "it", "Italian"),
    ("jav", "jv", "Javanese"),
    ("jpn", "ja", "Japanese"),
    ("kab", "kab", "Kabyle"),
    ("kat", "ka", "Georgian"),
    ("kaz", "kk", "Kazakh"),
    ("khm", "km", "Khmer"),
    ("kor", "ko", "Korean"),
    ("kur", "ku", "Kurdish"),
    ("kzj", "kzj", "Coastal Kadazan"),
    ("lat", "la", "Latin"),
    ("lfn", "lfn", "Lingua Franca Nova"),
    ("lit", "lt", "Lithuanian"),
    ("lvs", "lv", "Latvian"),
    ("mal", "ml", "Malayalam"),
    ("mar", "mr", "Marathi"),
    ("max", "max", "North Moluccan Malay"),
    ("mhr", "mhr", "Eastern Mari"),
    ("mkd", "mk", "Macedonian"),
    ("mon", "mn", "Mongolian"),
    ("nds", "nds", "Low German"),
    ("nld", "nl", "Dutch"),
    ("nno", "nn", "Norwegian Nynorsk"),
    ("nob", "nb", "Norwegian Bokmål"),
    ("nov", "nov", "Novial"),
    ("oci", "oc", "Occitan"),
    ("orv", "orv", "Old Russian"),
    ("pam", "pam", "Kapampangan"),
    ("pes", "fa", "Persian"),
    ("pms", "pms", "Piedmontese"),
    ("pol", "pl", "Polish"),
    ("por", "pt", "Portuguese"),
    ("ron", "ro", "Romanian"),
    ("rus", "ru", "Russian"),
    ("slk", "sk", "Slovak"),
    ("slv", "sl", "Slovenian"),
    ("spa", "es", "Spanish"),
    ("sqi", "sq", "Albanian"),
    ("srp", "sr", "Serbian"),
    ("swe", "sv", "Swedish"),
    ("swg", "swg", "Swabian"),
    ("swh", "sw", "Swahili"),
    ("tam", "ta", "Tamil"),
    ("tat", "tt", "Tatar"),
    ("tel", "te", "Telugu"),
    ("tgl", "tl", "Tagalog"),
    ("tha", "th", "Thai"),
    ("tuk", "tk", "Turkmen"),
    ("tur", "tr", "Turkish"),
    ("tzl", "tzl", "Talossan"),
    ("uig", "ug", "Uyghur"),
    ("ukr", "uk", "Ukrainian"),
    ("urd", "ur", "Urdu"),
    ("uzb", "uz", "Uzbek"),
    ("vie", "vi", "Vietnamese"),
    ("war", "war", "Waray"),
    ("wuu", "wuu", "Wu Chinese"),
    ("xho", "xh", "Xhosa"),
    ("yid", "yi", "Yiddish"),
    ("yue", "yue", "Cantonese"),
    ("zsm", "ms", "Malay"),
)

TATOEBA_TEST_CODES: tuple[str, ...] = tuple(code for code, _, _ in TATOEBA_LANGUAGES)

_ALL_ROWS = TATOEBA_LANGUAGES + ((TATOEBA_ENGLISH_CODE, ENGLISH, "English"),)
_TATOEBA_TO_LANG = {code: lang for code, lang, _ in _ALL_ROWS}
_LANG_TO_TATOEBA = {lang: code for code, lang, _ in _ALL_ROWS}
_LANG_NAMES = {lang: name for _, lang, name in _ALL_ROWS}

# canonical code -> FLORES-200 file stem (ISO 639-3, with the script where FLORES has several): the
# language's main file where FLORES has several (zh = cmn_Hans, ms = zsm, ar = ara, ak = aka), and a
# macro-language's individual language that FLORES has (fa = pes, ps = pbt, ku = kmr, om = gaz,
# qu = quy, din = dik), so that training data labelled with the macro-language's code meets it; the
# key of every other file follows from its stem (flores_language).
FLORES_FILES = {
    "af": "afr",
    "ak": "aka",
    "ar": "ara",
    "az": "azj",
    "be": "bel",
    "bg": "bul",
    "bn": "ben",
    "ca": "cat",
    "ckb": "ckb",
    "cs": "ces",
    "cy": "cym",
    "da": "dan",
    "de": "deu",
    "din": "dik",
    "el": "ell",
    "en": "eng",
    "eo": "epo",
    "es": "spa",
    "et": "est",
    "eu": "eus",
    "fa": "pes",
    "fi": "fin",
    "fr": "fra",
    "ga": "gle",
    "gd": "gla",
    "gl": "glg",
    "he": "heb",
    "hi": "hin",
    "hr": "hrv",
    "hu": "hun",
    "hy": "hye",
    "id": "ind",
    "is": "isl",
    "it": "ita",
    "ja": "jpn",
    "ka": "kat",
    "ko": "kor",
    "ku": "kmr",
    "ky": "kir",
    "lt": "lit",
    "lv": "lvs",
    "mi": "mri",
    "mk": "mkd",
    "ml": "mal",
    "mn": "khk",
    "mr": "mar",
    "ms": "zsm",
    "nb": "nob",
    "ne": "npi",
    "nl": "nld",
    "nn": "nno",
    "om": "gaz",
    "pl": "pol",
    "ps": "pbt",
    "pt": "por",
    "qu": "quy",
    "ro": "ron",
    "ru": "rus",
    "si": "sin",
    "sk": "slk",
    "sl": "slv",
    "sq": "als",
    "sr": "srp_Cyrl",
    "sv": "swe",
    "sw": "swh",
    "tg": "tgk",
    "th": "tha",
    "tr": "tur",
    "ug": "uig",
    "uk": "ukr",
    "vi": "vie",
    "zh": "cmn_Hans",
}


_FLORES_KEYS = {stem: lang for lang, stem in FLORES_FILES.items()}
_SCRIPT_SUBTAG = re.compile(r"[A-Za-z]{4}")


def flores_language(stem: str) -> str:
    """The language key of a FLORES-200 file stem (`deu`, `cmn_Hant`, `ace_Arab`; the layout of
    Helsinki-NLP's OPUS-MT-testsets copy, which names the script only of languages FLORES has in
    several scripts). One rule, so that every file has its own key:

    1. a stem FLORES_FILES lists: its key there (`deu` -> `de`, `cmn_Hans` -> `zh`, `pes` -> `fa`,
       `zsm` -> `ms`, `srp_Cyrl` -> `sr`, `ara` -> `ar`, `aka` -> `ak`);
    2. a stem with a script: `<canonical code>-<Script>` (`cmn_Hant` -> `zh-Hant`, `ace_Arab` ->
       `ace-Arab`, `ara_Latn` -> `ar-Latn`, `kas_Deva` -> `ks-Deva`);
    3. otherwise its canonical code (`uzn` -> `uz`, `acm` -> `acm`), or the stem itself where rule 1
       gave that code to the language's main file (`twi` (Akan: aka), `msa` (Malay: zsm)).

    canonical_language and resolve_language read every key (`zh-Hant` -> `zh`, `twi` -> `ak`), so a
    variety counts as its canonical language wherever a model lists only that.
    UnknownLanguageError for a stem that names no language."""
    if stem in _FLORES_KEYS:
        return _FLORES_KEYS[stem]
    language, _, script = stem.partition("_")
    code = canonical_language(stem)
    if script:
        return f"{code}-{script.title()}"
    return language if code in FLORES_FILES else code


def flores_languages(split_dir: str | Path, split: str | None = None) -> dict[str, Path]:
    """{key (flores_language): file} of every `<stem>.<split>` file in a FLORES-200 split directory
    (any split suffix when `split` is None: the first in name order), English (`en`) included,
    sorted by key; files whose stem names no language are left out. ValueError naming both files
    if two get one key (a directory of another layout)."""
    found: dict[str, Path] = {}
    for path in sorted(Path(split_dir).glob(f"*.{split or '*'}")):
        stem = path.name.split(".", 1)[0]
        if not path.is_file() or (split is not None and path.name != f"{stem}.{split}"):
            continue
        try:
            key = flores_language(stem)
        except UnknownLanguageError:
            continue
        if key in found and found[key].name.split(".", 1)[0] != stem:
            raise ValueError(f"FLORES files {found[key]} and {path} both have the language key {key!r}")
        found.setdefault(key, path)
    return dict(sorted(found.items()))


def duplicate_flores_files(split_dir: str | Path, split: str | None = None) -> dict[str, Path]:
    """{key: the file it repeats} for every file of flores_languages whose bytes equal another key's
    file: Helsinki-NLP's copy holds Malay twice (`msa` = `zsm`), so an average over every file would
    count it twice. The file kept is the one FLORES_FILES names (`zsm`), else the first by name."""
    files = flores_languages(split_dir, split)
    by_content: dict[tuple[int, str], list[str]] = {}
    by_size: dict[int, list[str]] = {}
    for key, path in files.items():
        by_size.setdefault(path.stat().st_size, []).append(key)
    for size, keys in by_size.items():
        for key in keys if len(keys) > 1 else ():  # only files of one size can be equal: read only those
            by_content.setdefault((size, hashlib.sha1(files[key].read_bytes()).hexdigest()), []).append(key)
    copies = {}
    for keys in by_content.values():
        named = [key for key in keys if files[key].name.split(".", 1)[0] in _FLORES_KEYS]
        kept = (named or sorted(keys, key=lambda key: files[key].name))[0]
        copies.update({key: files[kept] for key in keys if key != kept})
    return copies


def flores_file(split_dir: str | Path, lang: str, split: str | None = None) -> Path | None:
    """The file of language key `lang` (a canonical code, or a FLORES variety key such as `zh-Hant`:
    see flores_language) in a FLORES-200 split directory (`flores200/devtest`): `<stem>.<split>`,
    any split suffix when `split` is None (the first in name order); None when no file there has
    that key. The one finder of FLORES files (data_prep, eval and ems)."""
    stem = FLORES_FILES.get(lang)
    if stem is None:
        return flores_languages(split_dir, split).get(lang)
    return next((path for path in sorted(Path(split_dir).glob(f"{stem}.{split or '*'}")) if path.is_file()), None)


# The script of FLORES-200's file of a language where CLDR's likely-subtags data (langcodes' maximize)
# names another: Arabic varieties and South Azerbaijani, which CLDR lacks (it then says Latin), Crimean
# Tatar (CLDR: Cyrillic) and Central Atlas Tamazight (CLDR: Latin). Checked against every FLORES-200
# file by tests/test_lowres_corpora.py.
_USUAL_SCRIPTS = {"acm": "Arab", "acq": "Arab", "ajp": "Arab", "azb": "Arab", "crh": "Latn", "tzm": "Tfng"}
# ISO 15924 codes that stand for a mix of scripts, and the scripts a character of such text has
_SCRIPT_PARTS = {"Jpan": ("Hani", "Hira", "Kana"), "Kore": ("Hang", "Hani"), "Hans": ("Hani",), "Hant": ("Hani",)}


def usual_script(lang: str) -> str:
    """The ISO 15924 script that text of a language key (`mni`, `ps`, `crh`) is written in when no
    script is named: FLORES-200's where it has the language in one script, else CLDR's likely script."""
    import langcodes

    return _USUAL_SCRIPTS.get(lang) or langcodes.Language.get(lang).maximize().script


def writes_in(script: str, usual: str) -> bool:
    """Whether text found to be in `script` (a character's script: `Hani`) is in the script `usual`
    (which may stand for a mix: `Jpan`, `Hans`)."""
    return script == usual or script in _SCRIPT_PARTS.get(usual, ())


def corpus_language(tag: str, script: str | None = None) -> str:
    """The language code of a corpus pair folder for text in the language `tag` written in `script`
    (ISO 15924; None: the tag's own script subtag, else the language's usual script): the key
    FLORES-200's file of the language has where FLORES_FILES names it (`pbt` -> `ps`, `dik` -> `din`),
    else the canonical code (`twi` -> `ak`), with `_<Script>` appended when the script is not the
    usual one (usual_script): `mni_Beng` -> `mni`, Latin-script `mni` -> `mni_Latn`, `ace_Latn` ->
    `ace`, `ace_Arab` -> `ace_Arab`, `kas_Deva` -> `ks_Deva`. The script is joined with `_` because a
    corpus code holds no `-` (ems.corpus); resolve_language takes FLORES-200's key of the same
    language and script (`ace-Arab`, `mni`) to it. A code it returns gives itself back.
    UnknownLanguageError for a tag that names no language."""
    language = re.split("[-_]", tag, maxsplit=1)[0].lower()
    base = _FLORES_KEYS.get(language) or canonical_language(language)
    script = (script or _script_subtag(tag) or usual_script(base)).title()
    return base if writes_in(script, usual_script(base)) else f"{base}_{script}"


class UnknownLanguageError(ValueError):
    """A language code that is not in the table."""


def tatoeba_code_to_lang(code: str) -> str:
    """Tatoeba 3-letter code (`deu`, also `eng`) -> canonical code (`de`); raises UnknownLanguageError."""
    try:
        return _TATOEBA_TO_LANG[code]
    except KeyError:
        raise UnknownLanguageError(
            f"unknown Tatoeba language code {code!r}; expected one of the {len(TATOEBA_TEST_CODES)} "
            f"LASER test-set codes (lowercase, e.g. 'deu', 'cmn') or {TATOEBA_ENGLISH_CODE!r}"
        ) from None


def lang_to_tatoeba_code(lang: str) -> str | None:
    """Canonical code (`de`, also `en`) -> Tatoeba 3-letter code (`deu`), or None if Tatoeba has none."""
    return _LANG_TO_TATOEBA.get(lang)


def language_name(lang: str) -> str:
    """Canonical code of a Tatoeba language (`de`) -> English name (`German`); raises UnknownLanguageError."""
    try:
        return _LANG_NAMES[lang]
    except KeyError:
        raise UnknownLanguageError(f"no name known for language code {lang!r}") from None


# Language subtag -> canonical code, where langcodes' answer is wrong for this project.
_LANGUAGE_OVERRIDES = {
    # langcodes: sr. Serbo-Croatian text may as well be Croatian or Bosnian: never guess (the
    # Tatoeba Challenge's hbs folder labels each line srp_*, hrv or bos_*, so this only names
    # lines without labels). `sh` is its ISO 639-1 code.
    "hbs": "hbs",
    "sh": "hbs",
    # langcodes: fa (via fa-AF). Dari stays apart unless the user folds it: merge={"prs": "fa"}.
    "prs": "prs",
    # langcodes: fil (a CLDR alias); this table and LASER's Tatoeba call Tagalog tl.
    "tgl": "tl",
    "tl": "tl",
    # langcodes: dtp (ISO 639-3 retired kzj into dtp in 2016); LASER's Tatoeba tests kzj apart.
    "kzj": "kzj",
    # langcodes with macro=True: chm, the Mari macro-language; this table has Eastern Mari, mhr.
    "mhr": "mhr",
    # Toki Pona: Tatoeba writes the 4-letter toki; ISO 639-3 assigned tok in 2022, after the
    # registry that langcodes 3.5.1 ships, which therefore rejects both.
    "toki": "tok",
    "tok": "tok",
}
_LANGUAGE_SUBTAG = re.compile(r"[a-z]{2,3}")


def canonical_language(tag: str) -> str:
    """A language tag (`cmn_Hans`, `es_419`, `fuv_Latn_NG`, `deu`, `ger`, `DE`, `pt-BR`) -> the
    project's canonical code (`zh`, `es`, `fuv`, `de`, `de`, `de`, `pt`): ISO 639-1 where one
    exists, else ISO 639-3, lowercase, without script or region; individual languages of a
    macro-language that this table folds (cmn, lvs, zsm, pes, swh) become the macro-language's code.

    Raises UnknownLanguageError (a ValueError) for a tag that is not a registered language
    (`xx`, `und`, ``), TypeError for one that is not a str.
    """
    if not isinstance(tag, str):
        raise TypeError(f"a language code must be a str, got {type(tag).__name__}: {tag!r}")
    return _canonical_language(tag)


@functools.cache
def _canonical_language(tag: str) -> str:
    import langcodes  # 60 ms to import; a tag that is already a model's code never needs it

    override = _LANGUAGE_OVERRIDES.get(re.split("[-_]", tag, maxsplit=1)[0].lower())
    if override:
        return override
    bcp47 = tag.replace("_", "-")
    try:
        language = langcodes.Language.get(langcodes.standardize_tag(bcp47, macro=True)).language
    except langcodes.LanguageTagError as error:
        raise UnknownLanguageError(f"cannot parse the language tag {tag!r} ({error}){_closest_hint(tag)}") from None
    if language is None or not _LANGUAGE_SUBTAG.fullmatch(language) or not langcodes.tag_is_valid(language):
        raise UnknownLanguageError(f"{tag!r} does not name a registered language{_closest_hint(tag)}")
    if not langcodes.tag_is_valid(bcp47):  # a registered language with a misspelled script or region: zho_Hnas
        raise UnknownLanguageError(f"{tag!r}: the script or region part is not a registered subtag{_closest_hint(tag)}")
    return language


def split_language_pair(name: str) -> tuple[str, str] | None:
    """The two canonical codes a language-pair name such as a dataset config's joins with "-":
    `en-de`, `deu_Latn-eng_Latn`, `en-pt-br` (en, pt), `zh-tw-en` (zh, en). The name is split at its
    first "-" whose two sides are both language tags (so `en-pt-br` is en | pt-br, never en-pt | br);
    None when no "-" splits it so."""
    parts = name.split("-")
    for cut in range(1, len(parts)):
        left, right = "-".join(parts[:cut]), "-".join(parts[cut:])
        codes = [_canonical_or_none(side) for side in (left, right)]
        if all(codes):
            return codes[0], codes[1]
    return None


def closest_language_codes(tag: str, n: int = 3) -> list[str]:
    """Up to `n` codes a mistyped or unknown tag most likely meant, each with its language's name
    where the Tatoeba table has one ("deu (German)"): a language named in English ("German") gives
    its code; otherwise the nearest spellings among the ISO 639-1 codes, their ISO 639-3 forms and
    the Tatoeba test-set codes, those of the tag's length first (the tag's language part only, so
    `zho_Hnas` gives `zho` first)."""
    text = tag.strip().lower()
    by_name = [
        lang for lang, name in _LANG_NAMES.items() if name.lower() == text or name.lower().startswith(text + " ")
    ]
    if by_name:
        return [_with_name(lang) for lang in by_name[:n]]
    language_part = re.split("[-_]", text, maxsplit=1)[0]
    same_length = [code for code in _known_codes() if len(code) == len(language_part)]
    matches = difflib.get_close_matches(language_part, same_length, n=n, cutoff=0.6)  # `frx`: fra before fr
    matches += difflib.get_close_matches(language_part, _known_codes(), n=n + len(matches), cutoff=0.6)
    return [_with_name(code) for code in dict.fromkeys(matches)][:n]


def _with_name(code: str) -> str:
    name = _LANG_NAMES.get(_TATOEBA_TO_LANG.get(code) or _canonical_or_none(code))
    return f"{code} ({name})" if name else code


def _closest_hint(tag: str) -> str:
    closest = closest_language_codes(tag)
    return f"; closest known codes: {', '.join(closest)}" if closest else ""


@functools.cache
def _known_codes() -> tuple[str, ...]:
    """The ISO 639-1 codes of the IANA registry that langcodes ships, their ISO 639-3 forms and
    the Tatoeba codes: the codes a typo is most likely a misspelling of."""
    import langcodes

    registry = (resources.files("langcodes") / "data" / "language-subtag-registry.txt").read_text(encoding="utf-8")
    two_letter = re.findall(r"^Type: language\nSubtag: ([a-z]{2})$", registry, flags=re.MULTILINE)
    three_letter = [langcodes.Language.get(code).to_alpha3() for code in two_letter]
    return tuple(dict.fromkeys([*two_letter, *three_letter, *TATOEBA_TEST_CODES, TATOEBA_ENGLISH_CODE]))


def covered_language(lang: str, languages: Sequence[str] | None) -> str | None:
    """The code to pass to an encoder whose `languages` are `languages` (None = any language) for the
    tag `lang`: the listed code it names (`deu` -> `de`), `lang` itself for an encoder of any
    language, or None when the encoder lacks it. UnknownLanguageError (naming the closest codes)
    when `lang` is no language at all: a misspelled config fails instead of being skipped."""
    if languages is None or lang in languages:
        return lang
    canonical_language(lang)
    try:
        return resolve_language(lang, languages)
    except UnknownLanguageError:
        return None


def resolve_language(lang: str, languages: Sequence[str], owner: str = "this model") -> str:
    """The entry of `languages` (a model's or vocabulary's list) that the tag `lang` names: `lang`
    itself if listed, else the listed code with the same canonical code and script (`cmn_Hant` ->
    `zh-Hant` in a list with `zh` and `zh-Hant`, FLORES's variety keys: see flores_language), else
    the listed code with the same canonical code (`EN`, `eng`, `en-US` -> `en`; `cmn`, `zho`,
    `zh-Hant`, `cmn_Hans` -> `zh`; `deu_Latn` -> `de`). Raises UnknownLanguageError
    (a ValueError), naming `owner`'s languages, for a tag that is no language or none of them, and
    TypeError, naming them too, for a `lang` that is no str (None: a language was not given)."""
    if lang in languages:
        return lang
    listing = f"{owner}'s languages: {' '.join(languages)}"
    if not isinstance(lang, str):
        raise TypeError(f"a language code must be a str, got {lang!r}; {listing}")
    try:
        code = canonical_language(lang)
    except UnknownLanguageError as error:
        raise UnknownLanguageError(f"{error}; {listing}") from None
    script = _script_subtag(lang)
    if script is None and code in languages:
        return code
    same = [listed for listed in languages if _canonical_or_none(listed) == code]
    same_script = [listed for listed in same if script is not None and _script_subtag(listed) == script]
    if len(same_script) == 1:  # cmn_Hant -> zh-Hant where a list has zh and zh-Hant
        return same_script[0]
    if code in languages:
        return code
    if len(same) == 1:
        return same[0]
    alias = "" if code == lang else f" (= {code!r})"
    if same:
        raise UnknownLanguageError(f"language {lang!r}{alias} names several of {listing}: say which")
    raise UnknownLanguageError(f"language {lang!r}{alias} is not in {listing}")


def _script_subtag(tag: str) -> str | None:
    """The script subtag of a tag (`Hant` of `zh-Hant`, `cmn_hant`), None without one."""
    return next((part.title() for part in re.split("[-_]", tag)[1:] if _SCRIPT_SUBTAG.fullmatch(part)), None)


def _canonical_or_none(tag: str) -> str | None:
    try:
        return canonical_language(tag)
    except UnknownLanguageError:
        return None
