"""The project's benchmarks, each a module with one job that its docstring names, run from the repository
root as `python -m benchmarks.NAME` (`--help` lists its options), and its two benchmark studies, each a
subpackage: gpu/, the GPU acceptance run (`python -m benchmarks.gpu.acceptance`; its loop against the bare
step: `python -m benchmarks.gpu.loop_overhead`), and peer/, the peer benchmark against sentence-transformers
(`python -m benchmarks.peer.sentence_transformers`). They import the installed project as a user's script
would; a step that must run in a process of its own is a module run with `python -m` too. A module without a
command line is a helper of the benchmarks that import it: bare_step, the training step without its loop that
the throughput benchmarks and the GPU run time; report_files, where a benchmark writes its table and figures;
the studies' helpers, listed in their packages. Inputs shared with the tests come from the `fixtures`
package. The studies that analyse training runs (the ablation, the compute map, the language groups) are
ems.apps.studies.
"""
