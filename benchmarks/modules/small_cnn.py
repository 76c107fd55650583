"""The small CNN of tests/test_torch_cnn.py (conv - batch norm - ReLU - max pool, twice; global
average pool; linear head) at batch 8, 3x32x32 inputs: `saturn bench --module`."""
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(16, classes)

    def forward(self, x):
        return self.head(torch.flatten(self.pool(self.features(x)), 1))


def get_inputs():
    return [torch.randn(8, 3, 32, 32)]


def get_init_inputs():
    return [10]
