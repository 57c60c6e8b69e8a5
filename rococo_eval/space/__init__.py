"""The Space's logic under ``app.py``, which only builds the page and wires it to :mod:`~rococo_eval.space.handlers`.

- :mod:`~rococo_eval.space.logic`: what the Space does, in plain values: detect layouts, score uploads, write the
  report, list flipped queries, explore the attacks, compare with published numbers;
- :mod:`~rococo_eval.space.views`: how the page shows them: HTML tables, thumbnails, the page's DataFrames;
- :mod:`~rococo_eval.space.handlers`: what the page's buttons do, and :mod:`~rococo_eval.space.hub_requests`: the
  Leaderboard tab's requests to evaluate a model from the Hub (both import gradio; the other modules do not).

The leaderboard itself (its rules, its database, its records in a dataset repo, its rank bands) is the layer below,
:mod:`rococo_eval.board`, which the command uses too.
"""
