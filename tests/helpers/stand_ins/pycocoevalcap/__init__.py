"""A stand-in for pycocoevalcap in the reference environment of the official BLIP code (``.venv-reference``).

The official ``blip/data/utils.py`` (which holds ``pre_caption``) imports ``COCOEvalCap`` at module level for its
captioning evaluation, which retrieval never calls. The real package is 104 MB (it bundles Java tools for SPICE), so
the reference environment has this: the name, raising if used.
"""
