"""``pycocoevalcap.eval.COCOEvalCap`` (unusable)."""


class COCOEvalCap:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("pycocoevalcap stand-in: caption evaluation is not available in the reference environment")
