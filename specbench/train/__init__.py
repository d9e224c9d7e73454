"""Self-distillation of drafters: `python -m specbench.train strategy=eagle|medusa|draft_model|parallel target=<preset>`.

The target writes its own responses to training prompts that do not overlap the evaluation sets
(specbench.train.data), and a drafter learns to predict the target's tokens from them with the
target's hidden states teacher-forced (specbench.train.drafters). specbench.train.loop.train(cfg)
does the work; the checkpoint it writes loads with `strategy.checkpoint=<dir>` (eagle, medusa)
or `draft.path=<dir>` (draft_model).
"""
