"""The Space's logic under ``app.py``, which only builds the page and wires it to :mod:`~rococo_eval.space.handlers`.

- :mod:`~rococo_eval.space.logic`: what the Space does, in plain values: detect layouts, score uploads, write the
  report, list flipped queries, explore the attacks, compare with published numbers;
- :mod:`~rococo_eval.space.views`: how the page shows them: HTML tables, thumbnails, the page's DataFrames;
- :mod:`~rococo_eval.space.leaderboard`: the leaderboard's SQLite database and its rules, and its copy in a dataset
  repo, uploaded by :mod:`~rococo_eval.space.hub_upload` in a child process;
- :mod:`~rococo_eval.space.handlers`: what the page's buttons do (it imports gradio; the other modules do not).
"""
