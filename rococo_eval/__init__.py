"""rococo-eval: the RoCOCO robustness benchmark for image-text matching, on Hugging Face tools.

The package holds the pieces shared by the top-level faces (``rococo_recall.py``, ``rococo_dataset.py``,
``app.py`` and the ``rococo-eval`` command): the annotation files, the gallery layouts, the altered
images, score-file reading and reports.
"""

__version__ = "0.1.0"
