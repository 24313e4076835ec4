"""Margin-based bitext mining (Artetxe & Schwenk 2019, as in LASER and the EMS paper's BUCC table):
embeddings in, scored candidate pairs out.

    index      how one side is searched (IndexSpec, or "ivf-pq:nprobe=32,m=16"), building that index
    search     k-nearest neighbours by cosine, exact or through an index
    margin     margin scores over k neighbours each side, and the four retrieval modes
    streaming  text files read in one pass (distinct lines, in shards) and embedded chunk by chunk
    pipeline   the staged miner: files between stages, resumable, one machine or SLURM

Shared by the BUCC task (whose P/R/F1 and threshold live in eval.evaluators.bucc), the large-scale
retrieval and xSIM tasks (in memory: ems.mining.margin) and the `ems-mine` command (ems.apps.mine:
the pipeline, built from the same search and margin code).
"""
