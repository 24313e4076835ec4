"""Build a small local OPUS mirror from real FLORES-200 parallel text, for the offline tests.

Layout, as on OPUS: `ROOT/<Corpus>/<release>/raw/<lang>.zip` holding
`<Corpus>/raw/<lang>/<doc>.xml` sentence files, and `ROOT/<Corpus>/<release>/xml/<a>-<b>.xml.gz`
XCES sentence alignments (1:1 links, one linkGrp per document).
"""

from __future__ import annotations

import gzip
import zipfile
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

# project code -> FLORES-200 file stem
FLORES = {"de": "deu", "en": "eng", "fr": "fra", "ja": "jpn", "zh": "cmn_Hans", "ru": "rus"}


def flores_lines(data_dir: Path, lang: str) -> list[str]:
    return (data_dir / "flores200" / "devtest" / f"{FLORES[lang]}.devtest").read_text(encoding="utf-8").splitlines()


def flores_text(data_dir: Path, langs, lines: slice = slice(0, 300)) -> dict[str, list[str]]:
    """FLORES-200 devtest sentences `lines` for each language of `langs`."""
    return {lang: flores_lines(data_dir, lang)[lines] for lang in langs}


def build_mirror(
    root: Path,
    corpus: str,
    release: str,
    data_dir: Path,
    pairs: list[tuple[str, str]],
    lines: slice = slice(0, 300),
    docs: int = 3,
    text: dict[str, list[str]] | None = None,
) -> None:
    """Write `corpus` for `pairs` under `root`: FLORES lines `lines`, or the given aligned `text` per language."""
    base = root / corpus / release
    (base / "xml").mkdir(parents=True, exist_ok=True)
    (base / "raw").mkdir(parents=True, exist_ok=True)
    text = text or flores_text(data_dir, {lang for pair in pairs for lang in pair}, lines)
    per_doc = -(-len(next(iter(text.values()))) // docs)
    for lang, sentences in text.items():
        with zipfile.ZipFile(base / "raw" / f"{lang}.zip", "w") as archive:
            for d in range(docs):
                body = "".join(
                    f'<s id="{i + 1}">{escape(s)}</s>\n'
                    for i, s in enumerate(sentences[d * per_doc : (d + 1) * per_doc])
                )
                archive.writestr(
                    f"{corpus}/raw/{lang}/doc{d}.xml",
                    f'<?xml version="1.0" encoding="utf-8"?>\n<document id="doc{d}">\n{body}</document>\n',
                )
    for pair in pairs:
        a, b = sorted(pair)
        groups = []
        for d in range(docs):
            n = len(text[a][d * per_doc : (d + 1) * per_doc])
            links = "".join(f'<link xtargets="{i + 1};{i + 1}" id="SL{i}"/>\n' for i in range(n))
            groups.append(
                f'<linkGrp targType="s" fromDoc={quoteattr(f"{a}/doc{d}.xml.gz")} '
                f"toDoc={quoteattr(f'{b}/doc{d}.xml.gz')}>\n{links}</linkGrp>\n"
            )
        with gzip.open(base / "xml" / f"{a}-{b}.xml.gz", "wt", encoding="utf-8") as out:
            out.write(
                '<?xml version="1.0" encoding="utf-8"?>\n<cesAlign version="1.0">\n' + "".join(groups) + "</cesAlign>\n"
            )


def edit_sentence_archive(root: Path, corpus: str, release: str, lang: str, edit) -> None:
    """Rewrite `lang`'s sentence archive: `edit(member name, bytes)` gives the new bytes, or None to drop it."""
    path = root / corpus / release / "raw" / f"{lang}.zip"
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            if (data := edit(name, data)) is not None:
                archive.writestr(name, data)
