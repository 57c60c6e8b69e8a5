"""rococo-eval: the RoCOCO robustness benchmark for image-text matching, on Hugging Face tools.

The package holds the pieces under the top-level faces (``rococo_recall.py``, ``rococo_dataset.py``,
``app.py`` and the ``rococo-eval`` command), one module per idea, each importing only the ones below it:
gallery layouts (``layout``) and their detection (``layout_detection``); downloads and checksums
(``download``) and the pinned annotation files (``annotations``); the dataset's names (``configs``), its
data source (``source``), export (``export``) and what users call on it (``dataset``); image attacks
(``images``) and caption changes (``captions``); atomic file writing (``files``); score files
(``scorefiles``) and reports (``report``); models (``models``) and their embeddings (``embeddings``); the
Space's logic (``space``) and the command (``cli``). The README draws the module graph.
"""

__version__ = "0.1.0"
