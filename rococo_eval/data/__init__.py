"""The benchmark's data: the annotation files, the data source and its galleries, the dataset's configs and export,
benchmark folders.
"""
