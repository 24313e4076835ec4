"""The trainer's components, one module each; ems.training.train (the command line) holds the loop that
calls them, in this order:

    config        TrainConfig and its checks
    setup         inputs checked, data, model, engine, resume, and the Run the loop holds
    runtime       process group, DeepSpeed config and engine, batch layout, autocast, RNG seeds
    schedule      the lr schedule at the run's global batch, fitted to a time budget
    stopping      signals, the STOP file, max steps / epochs / minutes, stop_at_step
    saving        Checkpointer: save every save_every steps; divergence stops without a non-finite checkpoint
    resume        exact and elastic resume from the newest usable checkpoint, config changes
    metrics       the training log: metrics.jsonl, TensorBoard, the progress bar
    validator     validation losses on a stored stratified sample, per language pair
    probe         the retrieval probe behind the learning curves (its test pairs and scoring: retrieval_probe)

Each component that runs periodically owns its cadence (`should_run(step, last)` or the like,
from TrainConfig). The package imports nothing on its own: `python -m ems.training.train` holds its stop
signals before any of it is imported (ems.stop_signals).
"""
