"""The two experiments of Zhang et al.'s Figure 2: a PHM layer learns a 3-D rotation, and with
n=4 it learns Hamilton's rule from data (A is learned, not given)."""

import math

import torch

from phm_fairseq.modules import PHMLinear, QuaternionLinear


def fit(layer, inputs, targets, steps, lr):
    optimizer = torch.optim.Adam(layer.parameters(), lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(layer(inputs), targets)
        loss.backward()
        optimizer.step()
    return loss.item()


def rotation(axis, angle):
    x, y, z = torch.nn.functional.normalize(torch.tensor(axis, dtype=torch.float32), dim=0)
    K = torch.tensor([[0, -z, y], [z, 0, -x], [-y, x, 0]])
    return torch.eye(3) + math.sin(angle) * K + (1 - math.cos(angle)) * K @ K  # Rodrigues


def test_phm_layer_learns_a_3d_rotation():
    torch.manual_seed(0)
    R = rotation([1.0, 2.0, 3.0], 0.7)
    points = torch.randn(256, 3)
    layer = PHMLinear(3, 3, n=3, bias=False)
    initial = torch.nn.functional.mse_loss(layer(points), points @ R.T).item()
    final = fit(layer, points, points @ R.T, steps=1500, lr=0.02)
    assert final < 1e-6 < initial
    torch.testing.assert_close(layer.weight, R, atol=1e-3, rtol=0)


def test_phm_layer_with_n4_learns_the_hamilton_product():
    torch.manual_seed(0)
    teacher = QuaternionLinear(16, 16, bias=False)  # x -> W (x) x, W fixed
    inputs = torch.randn(512, 16)
    with torch.no_grad():
        targets = teacher(inputs)
    student = PHMLinear(16, 16, n=4, bias=False)  # learned A from a random start
    initial = torch.nn.functional.mse_loss(student(inputs), targets).item()
    final = fit(student, inputs, targets, steps=3000, lr=0.01)
    assert final < 1e-5 * targets.var().item() < initial
    torch.testing.assert_close(student.weight, teacher.weight, atol=2e-3, rtol=0)
