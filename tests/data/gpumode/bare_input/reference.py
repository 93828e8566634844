"""2 * x + 1, where the data handed to a kernel is the tensor x itself."""

import torch
from task import input_t, output_t


def generate_input(rows: int, cols: int, seed: int) -> input_t:
    gen = torch.Generator()
    gen.manual_seed(seed)
    return torch.randn(rows, cols, generator=gen)


def ref_kernel(data: input_t) -> output_t:
    return 2 * data + 1
