import json
import os
import random

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# the test models are tiny: one thread is fastest, and never spins against other processes' threads
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def seed():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    return 0


# --- a tiny saved checkpoint and a small grounding + VQA dataset in the vrh JSONL format --------------
@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    from vrh.testing.tiny_models import save_tiny, tiny_qwen2_5_vl

    model, processor = tiny_qwen2_5_vl(seed=0)
    return str(save_tiny(model, processor, tmp_path_factory.mktemp("tiny_qwen2_5_vl")))


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    rows = []
    for i in range(12):
        im = Image.new("RGB", (84, 56), (240, 240, 240))
        x, y = 4 + 5 * i, 8 + i
        ImageDraw.Draw(im).rectangle([x, y, x + 20, y + 16], fill=(200, 30, 30))
        im.save(root / f"im{i}.png")
        rows.append({"id": f"g{i}", "image": f"im{i}.png", "task": "grounding", "expression": "the red box",
                     "box": [x, y, x + 20, y + 16], "box_format": "xyxy"})
        rows.append({"id": f"q{i}", "image": f"im{i}.png", "task": "vqa", "question": "what colour is the box?",
                     "answer": "red"})
    path = root / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def kill_mid_run():
    """``kill(cmd, env, ready)``: start ``cmd``, send it SIGKILL once ``ready()`` holds (polled, for 120 s at
    most) and fail if it finished first: a real kill -9 mid-run (not a simulated exception), for the tests
    that resume a killed command."""
    import signal
    import subprocess
    import time

    def kill(cmd: list[str], env: dict[str, str], ready) -> None:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 120
            while time.time() < deadline and proc.poll() is None and not ready():
                time.sleep(0.05)
            assert proc.poll() is None, "the run finished before it could be killed"
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()

    return kill
