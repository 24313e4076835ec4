"""The applications on top of the core and the trainer: the demo, export, the mining command, the console
scripts, and the studies (studies/: the ablation, the compute map and its runs, the language groups)."""
