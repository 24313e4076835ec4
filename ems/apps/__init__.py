"""The applications on top of the core and the trainer: the demo, the ablation, export, the mining command and
the console scripts."""
