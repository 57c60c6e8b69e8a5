"""The Space's logic under ``app.py``, which only builds the page and wires it to :mod:`~rococo_eval.space.handlers`.

- :mod:`~rococo_eval.space.logic`: what the Space does, in plain values: detect layouts, score uploads, write the
  report, list flipped queries, explore the attacks, compare with published numbers;
- :mod:`~rococo_eval.space.views`: how the page shows them: HTML tables, thumbnails, the page's DataFrames;
- :mod:`~rococo_eval.space.leaderboard`: the leaderboard's rules and its SQLite database (the board, or the cache of
  the records in a dataset repo); :mod:`~rococo_eval.space.records`: one submission's record, defined once;
  :mod:`~rococo_eval.space.hub_records`: the records in the repo, transferred by
  :mod:`~rococo_eval.space.hub_transfer` in a child process;
- :mod:`~rococo_eval.space.handlers`: what the page's buttons do (it imports gradio; the other modules do not).
"""
