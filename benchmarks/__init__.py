"""The project's benchmarks and studies, each a module with one job that its docstring names, run from
the repository root as `python -m benchmarks.NAME` (`--help` lists its options). They import the
installed project as a user's script would; a step that must run in a process of its own is a module
run with `python -m` too. A module without a command line is a helper of the benchmarks that import it:
the GPU acceptance run's data (gpu_prepared), profiles (gpu_profiles), stage machinery (gpu_stage), stages
(gpu_environment, gpu_mfu, gpu_train, gpu_evaluate), timed training step (gpu_step), segmenters
(gpu_segmenters) and report (gpu_report); the peer benchmark's peer_grid, peer_report, peer_scoring and
peer_training; report_files, where a benchmark writes its table and figures. segmenters/ holds stand-ins
that the GPU acceptance run loads in place of jieba, fugashi and opencc. Inputs shared with the tests
come from the `fixtures` package.
"""
