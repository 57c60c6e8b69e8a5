"""Image-text models behind one interface (open_clip, transformers, BLIP and BLIP-2), and their embeddings cached on
disk.
"""
