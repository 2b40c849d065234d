"""Training a ResNet-18-shaped CNN as the PyTorch performance guide recommends: bf16 autocast,
channels_last, fused AdamW, the batch already on the GPU, no host reads inside the loop."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from common import profile
from torch import nn

BATCH, SIZE, CLASSES = 256, 224, 1000


class Basic(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


def resnet18() -> nn.Module:
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Basic(cin, cout, stride), Basic(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, CLASSES)]
    return nn.Sequential(*layers)


def main() -> None:
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    model = resnet18().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    x = torch.randn(BATCH, 3, SIZE, SIZE, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, CLASSES, (BATCH,), device="cuda")

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    profile("resnet_amp_train", step, warmup_steps=5)


if __name__ == "__main__":
    main()
