"""The GPU acceptance run: `python -m benchmarks.gpu.acceptance prepare` on a CPU machine, then `run` on a
lent GPU (docs/results/gpu.md). Its data (prepared), profiles (profiles), stage machinery (stage), stages
(environment, mfu, train, evaluate), timed training step (step), segmenters (segmenters, with the stand-ins
of standins/ that it loads in place of jieba, fugashi and opencc) and report (report); and
`python -m benchmarks.gpu.loop_overhead`, the training loop against its bare step on the same data.
"""
