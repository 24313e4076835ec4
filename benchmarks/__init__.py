"""The project's benchmarks and studies, each a module with one job that its docstring names, run from
the repository root as `python -m benchmarks.NAME` (`--help` lists its options). They import the
installed project as a user's script would; a step that must run in a process of its own is a module
run with `python -m` too. A module without a command line is a helper of the benchmarks that import it
(gpu_prepared, gpu_report; peer_grid, peer_report, peer_scoring, peer_training); segmenters/ holds
stand-ins that the GPU acceptance run loads in place of jieba, fugashi and opencc. Inputs shared with
the tests come from the `fixtures` package.
"""
