"""Mining as stages with files between them, for corpora past one process: two text files in, a
TSV of scored pairs out, through a work dir that every step reads from and writes to.

    options   MineOptions: what a run is asked to do, and which settings each stage's files depend on
    plan      the scan of both inputs (distinct lines, in shards), the manifests, the units of each step
    manifest  per stage: the settings and input fingerprints it was made with, a record per finished unit
    files     atomic writes (a killed or failed write leaves nothing that counts), shards seen as one array
    embed     a shard's vectors
    index     a side's IVF index: trained on a sample, populated per shard, merged on disk (HNSW: whole)
    knn       a shard's k nearest neighbours on the other side
    score     a shard's margins, best pairs and sorted run; the runs merged into the TSV
    launch    one unit (a SLURM array task: `python -m ems.apps.mine stage`), or every step on this machine

The stages use the in-memory miner's own pieces (ems.mining.search, ems.mining.margin), so their
TSV is that of ems.mining.margin.mine, byte for byte. ems.apps.mine is the command line; slurm/mine.sh
submits the steps as dependent sbatch array jobs.
"""
