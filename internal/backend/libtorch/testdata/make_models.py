#!/usr/bin/python3
"""Writes the TorchScript models of package libtorch's tests into argv[1].

Run by the tests themselves with Debian's interpreter (python3-torch):
    /usr/bin/python3 testdata/make_models.py DIR
"""
import os
import sys
from typing import Dict

import torch
from torch import nn


class Named(nn.Module):
    """Inputs by argument name, in another order than the config's; an
    INT64 and an FP64 output."""

    def forward(self, scale, counts):
        return counts * 2, (scale * 0.5).sum(1, keepdim=True)


class Picky(nn.Module):
    """Fails on negative inputs, as a model's own checks do."""

    def forward(self, x):
        if bool((x < 0).any()):
            raise RuntimeError("negative input")
        return x + 1


class DictArg(nn.Module):
    """A Dict[str, Tensor] argument: the Python worker's to run."""

    def forward(self, inputs: Dict[str, torch.Tensor]):
        return inputs["x"] + 1


def main():
    out = sys.argv[1]
    for name, model in (("named", Named()), ("picky", Picky()), ("dictarg", DictArg())):
        d = os.path.join(out, name, "1")
        os.makedirs(d, exist_ok=True)
        torch.jit.script(model).save(os.path.join(d, "model.pt"))


if __name__ == "__main__":
    main()
