"""Parallel text from Hugging Face `datasets`: a dataset on the Hub (streamed) or one on disk, written
in the aligned plain-text layout of ems.corpus.

    python -m data_prep import --format hf sentence-transformers/parallel-sentences-talks:en-de --out raw
    python -m data_prep import --format hf data/nllb.parquet --out raw --languages de en --min-score 1.06 \\
        --max-pairs 100000

In: a CorpusSpec whose `hf` is the source (data_prep.config; the command line's flags fill the same
fields), optionally a set of language pairs to keep. The source is a Hub id with an optional
`:config` (`owner/name:en-de`), or a local path: a `save_to_disk` directory, a directory of data
files (its README.md `configs:` block gives its configs, as on the Hub; else `:NAME` may name a
sub-folder, e.g. `parallel-sentences/:en-de`), or parquet / arrow / jsonl / json / csv / tsv files
(a file or a glob). Out: `OUT/<l1>-<l2>/<name>.<l1|l2>` per language pair (name: `name`, else the
dataset's with `.<config>`, and `.<split>` for a split other than train) and its entry in
`OUT/hf_import_report.json`: per language pair the rows read, the pairs kept and the skips by reason.

One module per job, in the order an import runs them:

    importer     import_hf: one source into an output directory, start to end
    report       hf_import_report.json: a rerun with the same settings reads nothing; stale files removed
    source       the source opened as one split (local path or Hub id), read in batches
    local        local layouts: save_to_disk, a directory of data files, parquet / arrow / json / csv files
    hub          a Hub id: offline mode, or the Hub not answering, and the datasets cache
    layout       which columns hold the two texts, their languages and the score
    rows         rows to pairs: the checks, the skips by reason, the caps, the files written
    errors       HFImportError: what each of them raises for a source it cannot import as asked
    plan_import  `ems-prep fetch`: a data-prep plan's `hf:` corpora, for its language pairs

The package imports nothing on its own: `from data_prep.hf.importer import import_hf`.
"""
