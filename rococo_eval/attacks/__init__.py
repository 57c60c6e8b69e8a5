"""RoCOCO's attacks for any image-text set: altered images, and captions with one word replaced (chosen by Embedding-
Influence).
"""
