"""Tests for the gettext-catalog corpus in data_prep.gettext_corpus and its catalog reader,
data_prep.gettext_catalogs."""

import gettext
import importlib.util
import json
import struct
import zipfile
from pathlib import Path

import pytest

from data_prep.gettext_catalogs import GettextCorpusError, MoParseError, find_catalogs, parse_mo
from data_prep.gettext_corpus import (
    build_gettext_corpus,
    clean_message,
    clean_pair,
    locale_to_language,
    split_catalog_pairs,
)
from ems.corpus import ReadReport, list_parallel, read_parallel


def installed_catalog(package: str, relative: str) -> Path:
    root = Path(importlib.util.find_spec(package).submodule_search_locations[0])
    return root / relative


DJANGO_DE = installed_catalog("django", "conf/locale/de/LC_MESSAGES/django.mo")
REAL_CATALOGS = [
    DJANGO_DE,
    installed_catalog("django", "contrib/admin/locale/ja/LC_MESSAGES/djangojs.mo"),
    installed_catalog("django", "contrib/auth/locale/ar/LC_MESSAGES/django.mo"),
    installed_catalog("wagtail", "admin/locale/fr/LC_MESSAGES/django.mo"),
    installed_catalog("wagtail", "locale/zh_Hans/LC_MESSAGES/django.mo"),
]


@pytest.mark.parametrize("path", REAL_CATALOGS, ids=lambda p: "/".join(p.parts[-6:]))
def test_parse_mo_agrees_with_stdlib_gettext(path):
    entries = parse_mo(path.read_bytes(), str(path))
    with open(path, "rb") as mo_file:
        reference = gettext.GNUTranslations(mo_file)

    singular = [entry for entry in entries if entry.msgid_plural is None]
    assert len(singular) > 50
    for entry in singular:
        if entry.context is None:
            assert reference.gettext(entry.msgid) == entry.msgstr
        else:
            assert reference.pgettext(entry.context, entry.msgid) == entry.msgstr


def test_parse_mo_reads_contexts_and_plurals():
    entries = parse_mo(DJANGO_DE.read_bytes(), str(DJANGO_DE))
    with open(DJANGO_DE, "rb") as mo_file:
        reference = gettext.GNUTranslations(mo_file)

    plurals = [entry for entry in entries if entry.msgid_plural is not None]
    assert plurals and any(entry.context is not None for entry in entries)
    for entry in plurals:
        # German plural index for n=1 is 0, so this is msgstr[0].
        assert reference.ngettext(entry.msgid, entry.msgid_plural, 1) == entry.msgstr


def test_parse_mo_big_endian_matches_little_endian():
    little = DJANGO_DE.read_bytes()
    count = struct.unpack_from("<I", little, 8)[0]
    header_words = struct.unpack_from("<7I", little, 0)
    originals_at, translations_at = header_words[3], header_words[4]
    big = bytearray(little)
    struct.pack_into(">7I", big, 0, *header_words)
    for table_at in (originals_at, translations_at):
        words = struct.unpack_from(f"<{2 * count}I", little, table_at)
        struct.pack_into(f">{2 * count}I", big, table_at, *words)

    assert parse_mo(bytes(big), "big-endian") == parse_mo(little, "little-endian")


def test_truncated_or_foreign_mo_raises_a_clear_error():
    data = DJANGO_DE.read_bytes()
    with pytest.raises(MoParseError, match=r"catalog-x\.mo: truncated"):
        parse_mo(data[: len(data) // 2], "catalog-x.mo")
    with pytest.raises(MoParseError, match=r"catalog-y\.mo: .*too short"):
        parse_mo(data[:10], "catalog-y.mo")
    with pytest.raises(MoParseError, match=r"catalog-z\.mo: not a \.mo catalog"):
        parse_mo(b"PK\x03\x04" + data[4:], "catalog-z.mo")


@pytest.mark.parametrize(
    "raw, cleaned",
    [
        ("Delete %(model_name)s", "Delete"),
        ("Page '%(page_title)s' deleted.", "Page deleted."),
        ("%s of %d selected", "of selected"),
        ("%1$s and %2$s", "and"),
        ("100%% done", "100 done"),
        ("Value: %.2f", "Value:"),
        ("Hello {0}, welcome to {site_name}{}", "Hello, welcome to"),
        ("Edit {{ page.title }} now", "Edit now"),
        ('<b>Bold</b> and <a href="/x">link</a><br/>next', "Bold and link next"),
        ("Tom &amp; Jerry&#39;s &lt;show&gt;", "Tom & Jerry's"),
        ("Located in %s, line %d.", "Located in, line."),
        ("Delete %s?", "Delete?"),
        ("Supprimer %s ?", "Supprimer?"),
        ("Added “%(object)s”.", "Added."),
        ("Deleted %(count)d %(items)s.", "Deleted."),
        ('Why not <a href="%(url)s">add some</a>?', "Why not add some?"),
        ("Enter a new password for <strong>%(username)s</strong>.", "Enter a new password for."),
        ("(in %s)", "(in)"),
        ("選択された%sを削除", "選択されたを削除"),
        ("  spread \n over\tlines  ", "spread over lines"),
        ("50% of users", "50% of users"),
    ],
)
def test_clean_message_strips_markup_and_placeholders(raw, cleaned):
    assert clean_message(raw) == cleaned


@pytest.mark.parametrize(
    "msgid, msgstr, reason",
    [
        ("Save", "", "untranslated_empty"),
        ("Save", "   ", "untranslated_empty"),
        ("Save", "Save", "untranslated_identical"),
        ("%(count)s", "%(count)s.", "no_letter"),
        ("<br>", "<br/> 123", "no_letter"),
        ("x" * 301, "y", "too_long"),
        ("URL %s", "%s URL", "identical_after_cleaning"),
    ],
)
def test_clean_pair_drops_unusable_entries(msgid, msgstr, reason):
    assert clean_pair(msgid, msgstr, max_chars=300) == (None, reason)


def test_clean_pair_keeps_translations():
    assert clean_pair("Delete %s?", "%s löschen?", max_chars=300) == (("Delete?", "löschen?"), "")


@pytest.mark.parametrize(
    "locale, language",
    [
        ("de", "de"),
        ("pt_BR", "pt"),
        ("pt_PT", "pt"),
        ("zh_Hans", "zh"),
        ("zh_Hant", "zh"),
        ("zh_CN", "zh"),
        ("zh_TW", "zh"),
        ("zh_TW.Big5", "zh"),
        ("zh_HK", "zh"),
        ("sr_Latn", "sr"),
        ("sr@latin", "sr"),
        ("es_AR", "es"),
        ("es_419", "es"),
        ("nb_NO", "nb"),
        ("no", "nb"),
        ("ca@valencia", "ca"),
        ("is_IS", "is"),
        ("yue", "yue"),
        ("kab", "kab"),
        ("en_GB", "en"),
    ],
)
def test_locale_to_language(locale, language):
    assert locale_to_language(locale) == language


@pytest.mark.parametrize("locale", ["", "C", "x", "12_AB", "english_US"])
def test_locale_to_language_rejects_non_locales(locale):
    with pytest.raises(ValueError, match="unrecognised locale"):
        locale_to_language(locale)


def test_split_catalog_pairs_is_unique_on_both_sides_and_leak_free():
    pairs = [(f"Sentence {i % 40}", f"Satz {i % 25}") for i in range(100)]
    train, heldout, removed = split_catalog_pairs(pairs, heldout_size=10)

    assert len(heldout) == 10
    assert len({en for en, _ in heldout}) == len({x for _, x in heldout}) == 10
    assert not {en for en, _ in train} & {en for en, _ in heldout}
    assert not {x for _, x in train} & {x for _, x in heldout}
    assert len(train) + len(heldout) + removed == len(pairs)


def read_en_x(split_dir: Path, language: str, read_report: ReadReport | None = None) -> list[tuple[str, str]]:
    pair_dir = split_dir / "-".join(sorted(("en", language)))
    en_path, x_path = pair_dir / "gettext.en", pair_dir / f"gettext.{language}"
    return list(read_parallel(en_path, x_path, read_report))


def build_small_django_corpus(out_dir: Path) -> dict:
    return build_gettext_corpus(
        out_dir,
        packages=("django",),
        languages=["de", "pt_BR", "ja", "xx"],
        min_pairs=100,
        heldout_size=50,
    )


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory) -> tuple[Path, dict]:
    out_dir = tmp_path_factory.mktemp("gettext") / "corpus"
    return out_dir, build_small_django_corpus(out_dir)


def test_build_writes_aligned_en_x_pairs_for_requested_languages(small_corpus):
    out_dir, report = small_corpus

    assert sorted(report["languages"]) == ["de", "ja", "pt"]
    assert report["languages_not_found"] == ["xx"]
    assert json.loads((out_dir / "corpus_report.json").read_text(encoding="utf-8")) == report
    for split, expected_key in (("train", "train_pairs"), ("heldout", "heldout_pairs")):
        files = list_parallel(out_dir / split)
        assert [(f.l1, f.l2, f.name) for f in files] == [
            ("de", "en", "gettext"),
            ("en", "ja", "gettext"),
            ("en", "pt", "gettext"),
        ]
        for language in ("de", "ja", "pt"):
            read_report = ReadReport()
            pairs = read_en_x(out_dir / split, language, read_report)
            # read_parallel raises on unequal line counts; no line may be empty either.
            assert read_report.read == read_report.kept == len(pairs)
            assert len(pairs) == report["languages"][language][expected_key]
            assert all(en.casefold() != x.casefold() for en, x in pairs)


def test_build_heldout_never_leaks_into_train(small_corpus):
    out_dir, _ = small_corpus
    for language in ("de", "ja", "pt"):
        train = read_en_x(out_dir / "train", language)
        heldout = read_en_x(out_dir / "heldout", language)
        assert len(heldout) == 50
        heldout_en = {en.casefold() for en, _ in heldout}
        heldout_x = {x.casefold() for _, x in heldout}
        assert len(heldout_en) == len(heldout_x) == 50
        assert not heldout_en & {en.casefold() for en, _ in train}
        assert not heldout_x & {x.casefold() for _, x in train}


def test_build_report_counts_add_up(small_corpus):
    _, report = small_corpus
    for language, stats in report["languages"].items():
        assert stats["catalogs"] > 0
        assert stats["entries_read"] == (stats["kept"] + sum(stats["dropped"].values()) + stats["duplicates"]), language
        assert stats["kept"] == (
            stats["train_pairs"] + stats["heldout_pairs"] + stats["removed_overlapping_heldout"]
        ), language
    assert report["languages"]["pt"]["locales"] == ["pt", "pt_BR"]


def test_build_is_deterministic_and_refuses_to_overwrite(small_corpus, tmp_path):
    out_dir, _ = small_corpus
    again = tmp_path / "again"
    build_small_django_corpus(again)

    first = {p.relative_to(out_dir): p.read_bytes() for p in out_dir.rglob("*") if p.is_file()}
    second = {p.relative_to(again): p.read_bytes() for p in again.rglob("*") if p.is_file()}
    assert first == second
    with pytest.raises(GettextCorpusError, match="overwrite=True"):
        build_small_django_corpus(again)


def test_build_raises_when_no_requested_language_exists(tmp_path):
    with pytest.raises(GettextCorpusError, match="none of the requested languages"):
        build_gettext_corpus(tmp_path, packages=("django",), languages=["xx"], min_pairs=10, heldout_size=5)


def make_wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in members.items():
            wheel.writestr(name, data)
    return path


def test_catalogs_are_read_from_a_wheel_file(tmp_path):
    data = DJANGO_DE.read_bytes()
    wheel = make_wheel(
        tmp_path / "pkg-1.0-py3-none-any.whl",
        {
            "pkg/__init__.py": b"",
            "pkg/locale/de/LC_MESSAGES/django.mo": data,
            "pkg/locale/de/LC_MESSAGES/django.po": b"not read",
        },
    )

    catalogs = list(find_catalogs(packages=(), wheels=[wheel]))

    assert [(c.source, c.locale, c.compiled_beside) for c in catalogs] == [
        ("pkg-1.0-py3-none-any.whl:pkg/locale/de/LC_MESSAGES/django.mo", "de", False),
        ("pkg-1.0-py3-none-any.whl:pkg/locale/de/LC_MESSAGES/django.po", "de", True),  # the .mo is read
    ]
    assert parse_mo(catalogs[0].data, catalogs[0].source) == parse_mo(data, str(DJANGO_DE))


def test_build_from_wheel_reports_corrupt_catalogs(tmp_path):
    data = DJANGO_DE.read_bytes()
    wheel = make_wheel(
        tmp_path / "pkg.whl",
        {
            "pkg/locale/de/LC_MESSAGES/django.mo": data,
            "pkg/locale/fr/LC_MESSAGES/django.mo": data[:1000],
            "pkg/locale/en/LC_MESSAGES/django.mo": data,
        },
    )

    report = build_gettext_corpus(tmp_path / "out", packages=(), wheels=[wheel], min_pairs=100, heldout_size=20)

    assert list(report["languages"]) == ["de"]
    assert report["languages"]["de"]["heldout_pairs"] == 20
    assert report["english_catalogs_skipped"] == 1
    [skipped] = report["skipped_catalogs"]
    assert skipped["catalog"] == "pkg.whl:pkg/locale/fr/LC_MESSAGES/django.mo"
    assert "truncated" in skipped["error"]


def test_bad_wheel_and_missing_package_raise_clear_errors(tmp_path):
    not_a_zip = tmp_path / "broken.whl"
    not_a_zip.write_bytes(b"this is not a zip file")
    with pytest.raises(GettextCorpusError, match="not a readable wheel"):
        list(find_catalogs(packages=(), wheels=[not_a_zip]))
    with pytest.raises(GettextCorpusError, match="wheel file not found"):
        list(find_catalogs(packages=(), wheels=[tmp_path / "missing.whl"]))
    with pytest.raises(GettextCorpusError, match="is not installed"):
        list(find_catalogs(packages=("no_such_package_ems_test",)))


@pytest.mark.parametrize(
    "arguments, error, message",
    [
        ({"min_pairs": 100, "heldout_size": 100}, ValueError, "must exceed heldout_size"),
        ({"languages": ["en"]}, ValueError, "source side"),
        ({"languages": "de"}, TypeError, "must be a collection"),
        ({"packages": "django"}, TypeError, "must be a collection"),
        ({"packages": (), "wheels": ()}, ValueError, "nothing to read"),
    ],
)
def test_build_rejects_bad_arguments_before_reading(tmp_path, arguments, error, message):
    with pytest.raises(error, match=message):
        build_gettext_corpus(tmp_path, **arguments)
    assert not any(tmp_path.iterdir())
