"""lab/scripts/organism_e_position_probe.py: the probe finds a place a tower's features carry (a planted
position code: R^2 ~ 1) and none where they carry none (constant features: R^2 <= 0); the targets' geometry."""

import sys
from pathlib import Path
from types import SimpleNamespace

import torch

from vrh.organism import world

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "lab" / "scripts"))
import organism_e_position_probe as probe  # noqa: E402

GRID = 8


class _Tower(torch.nn.Module):
    """Two hidden states of 1 + 64 tokens: layer 0 carries each patch's (row, col) plus noise, layer 1 a constant."""

    def forward(self, pixel_values, output_hidden_states=True):
        b = pixel_values.shape[0]
        i, j = torch.meshgrid(torch.arange(GRID), torch.arange(GRID), indexing="ij")
        pos = torch.stack([i.flatten(), j.flatten()], 1).float()  # [64, 2]
        planted = torch.cat([torch.zeros(1, 2), pos]).expand(b, -1, -1)  # [b, 65, 2]
        planted = torch.cat([planted, torch.randn(b, 65, 3)], -1)  # [b, 65, 5]
        return SimpleNamespace(hidden_states=(planted, torch.ones(b, 65, 5)))


def _image_processor(images, return_tensors="pt"):
    return {"pixel_values": torch.zeros(len(images), 3, 112, 112)}


def test_a_planted_position_is_found_and_a_constant_carries_none():
    torch.manual_seed(0)
    scenes = [world.grounding_sample(1, i)["scene"] for i in range(12)]
    rec = probe.probe(_Tower(), _image_processor, scenes[:8], scenes[8:], GRID)
    r2 = rec["r2_by_layer"]
    assert r2["cell"][0] > 0.99 and r2["background"][0] > 0.99 and r2["object_centre"][0] > 0.7
    assert all(r2[k][1] <= 0.01 for k in r2)


def test_targets_mark_the_cells_an_object_meets_and_its_centre_cell():
    scene = world.grounding_sample(2, 0, level="single")["scene"]
    pos, free, centres = probe.token_targets(scene, GRID)
    assert pos.shape == (64, 2) and pos.min() == 0 and pos.max() == 1
    (v, centre), = centres
    x1, y1, x2, y2 = scene.objects[0].box
    assert not free[v] and centre.tolist() == [(y1 + y2) / 2 / 112, (x1 + x2) / 2 / 112]
    cells = {(r, c) for r in range(GRID) for c in range(GRID) if not free[r * GRID + c]}
    assert cells == {(r, c) for r in range(int(y1 // 14), int((y2 - 1e-9) // 14) + 1)
                     for c in range(int(x1 // 14), int((x2 - 1e-9) // 14) + 1)}
