"""The leaderboard, below both faces: the Space shows it and takes submissions, the command migrates its dataset repo.

- :mod:`~rococo_eval.board.leaderboard`: the leaderboard's rules and its SQLite database (the board, or the cache of
  the records in a dataset repo);
- :mod:`~rococo_eval.board.ranking`: the board's order and its rank bands, from the rows' per-query outcomes;
- :mod:`~rococo_eval.board.records`: one submission's record, defined once;
- :mod:`~rococo_eval.board.hub_records`: the records in the repo, transferred by
  :mod:`~rococo_eval.board.hub_transfer` in a child process;
- :mod:`~rococo_eval.board.migration`: an old ``leaderboard.jsonl`` turned into records, once;
- :mod:`~rococo_eval.board.requests`: the requests to evaluate a model from the Hub, checked and claimed;
- :mod:`~rococo_eval.board.worker`: the worker that evaluates them (``rococo-eval worker``) and commits their records.

None of them imports gradio.
"""
