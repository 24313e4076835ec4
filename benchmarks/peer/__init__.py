"""The peer benchmark: sentence-transformers' stock trainer against the EMS trainer at equal time,
`python -m benchmarks.peer.sentence_transformers` (docs/results/peer.md). Its peer's training (training),
the (vocabulary, lr) grid and its search (grid), the scoring both sides share (scoring) and the report's
tables (report).
"""
