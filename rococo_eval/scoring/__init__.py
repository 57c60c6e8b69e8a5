"""Scoring: a model's galleries from its embeddings, two-stage re-ranking, and the one path from score files to
results.
"""
