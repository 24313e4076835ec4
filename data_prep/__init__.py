"""Building and reading the parallel corpora the encoder is trained and evaluated on."""
