"""A tiny MLP for the state_dict flow's integration tests."""
import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, n_in, hidden=8):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_in, hidden), nn.Tanh())
        self.head = nn.Linear(hidden, 1)

    def forward(self, features):
        return self.head(self.body(features))
