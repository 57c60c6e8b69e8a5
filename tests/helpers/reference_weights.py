"""Seeded random weights for the small official models of the parity tests (imported by the reference runners).

A model's own initialisation leaves norms at the identity and biases at zero, and would hide a norm or a bias that the
project loaded into the wrong place or left out of its forward: here every weight, bias, norm and batch-norm statistic
is drawn from one seeded generator.
"""

import numpy as np


def randomise(modules, seed: int) -> None:
    """Norms' scales ``1 + N(0, 0.1)``, running variances ``0.5 + |N(0, 1)|``, embedding tables ``N(0, 0.5)``, other
    matrices and kernels ``N(0, 1.5 / sqrt(fan_in))``, the rest (biases, running means, vectors) ``N(0, 0.1)``; in the
    order of ``modules``' submodules, each module once."""
    import torch
    from torch import nn

    generator = torch.Generator().manual_seed(seed)
    norms = (nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm)
    seen = set()
    with torch.no_grad():
        for module in (sub for root in modules for sub in root.modules()):
            if id(module) in seen:
                continue
            seen.add(id(module))
            tensors = list(module.named_parameters(recurse=False)) + list(module.named_buffers(recurse=False))
            for name, tensor in tensors:
                if name in ("num_batches_tracked", "position_ids", "token_type_ids", "attn_mask"):
                    continue
                noise = torch.randn(tensor.shape, generator=generator)
                if isinstance(module, norms) and name == "weight":
                    tensor.copy_(1 + 0.1 * noise)
                elif name == "running_var":
                    tensor.copy_(0.5 + noise.abs())
                elif isinstance(module, nn.Embedding):
                    tensor.copy_(0.5 * noise)
                elif tensor.ndim >= 2:
                    tensor.copy_(noise * (1.5 / np.prod(tensor.shape[1:]) ** 0.5))
                else:
                    tensor.copy_(0.1 * noise)
