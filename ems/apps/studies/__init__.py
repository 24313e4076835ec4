"""The studies: commands that train and score many runs, or analyse runs already trained and scored; none of
them evaluates an encoder itself (eval does).

    ablation          seeded ablations at a fixed step budget: variants x seeds, mean ± sd
                      (python -m ems.apps.studies.ablation)
    compute_map_runs  the scaling runner: the runs of a compute→quality map, sizes x budgets, each a point
                      (python -m ems.apps.studies.compute_map_runs)
    compute_map       the map from its points: fits, frontier, projections (python -m ems.apps.studies.compute_map),
                      with compute_map_points (the points' files) and compute_map_fit (the power-law fit)
    compare_groups    two encoders' results by language group side by side
                      (python -m ems.apps.studies.compare_groups)
    heads_study       the trained heads' settings, chosen on MLQE-PE dev, and their training-set size
                      (python -m ems.apps.studies.heads_study)
    quoted_reference_rows  the EMS paper's quoted Tatoeba figures averaged over our language groups
                      (python -m ems.apps.studies.quoted_reference_rows)

The language groups themselves (a results.json split by each language's training pairs) are
eval.language_groups: the demo's report uses them too, and the ablation runs the demo's stages, so in
ems/apps/ they would close an import cycle (demo -> studies -> demo). Nothing else in the product imports
a study (the import-linter contract "studies").
"""
