"""Unit direction of each row: the answer is unique only up to sign, so the task checks it itself."""

import torch
from task import input_t, output_t


def generate_input(rows: int, cols: int, seed: int) -> input_t:
    gen = torch.Generator(device="cuda")  # as many published tasks do: 'cuda' spelt out
    gen.manual_seed(seed)
    return (torch.randn(rows, cols, device="cuda", generator=gen),)


def ref_kernel(data: input_t) -> output_t:
    (x,) = data
    return x / x.norm(dim=1, keepdim=True)


def check_implementation(data: input_t, output: output_t) -> tuple[bool, str]:
    (x,) = data
    unit = ref_kernel(data)
    if output.shape != unit.shape or output.dtype != unit.dtype:
        return False, f"output {tuple(output.shape)} {output.dtype}, expected {tuple(unit.shape)} {unit.dtype}"
    same = torch.minimum((output - unit).abs().amax(dim=1), (output + unit).abs().amax(dim=1))
    if bool((same > 1e-4).any()):
        return False, f"row {int(same.argmax())} is not a unit vector along x (off by {float(same.max()):.3g})"
    return True, ""
