"""The Python modules an exported model directory ships (`python -m ems.apps.export`), kept here as real
modules so that ruff checks them and tests can import them; the export copies them into the directory, where
transformers' and sentence-transformers' `trust_remote_code` import them without the ems package:

- ems_core.py: the template of the shipped ems_core.py. Its imports from the ems package (its only ones) are
  where the export puts the source of the definitions they name (ems.apps.export.core_source), so the shipped
  file runs the package's own preprocessing and network; after them, the glue the two formats share
  (EMSTextTokenizer, check_tokenizer, load_model, pad_token_ids). Imported here, it uses the package's.
- ems_sentence_transformers.py: the sentence-transformers input module (modules.json names it), copied as is.
- modeling_ems.py: the transformers AutoConfig / AutoModel classes (config.json's auto_map), copied as is.

They import each other relatively (`from .ems_core import ...`), as trust_remote_code requires. This package
imports nothing of them."""
